"""`kcourse capstone` and `kcourse block`: a small GPT (and one transformer block) assembled from the
learner's graded kernels, PyTorch filling in what they have not written, checked against PyTorch.

One pipeline of small steps, one module each:
  kernels.py   which exercise serves which operation, and one adapter that calls any exercise's entry point
               on a model's tensors, its outputs allocated from the exercise's spec
  ops.py       the model's operations: PyTorch's, and the learner's wrapped in torch.autograd.Function
  gpt.py       the model (a GPT-2-style decoder) written once against those operations
  data.py      the embedded default text (generated, nothing downloaded) and --data FILE, as byte batches
  train.py     the child's side: the eager, torch.compile and kernel runs; the block check
  child.py     the sandboxed child process (learner code never runs in the grader's process)
  run.py       the parent's side: the roster, the child, the verdicts, the record
  report.py    the loss plot, the console tables and the Markdown report
Figures and tolerances live in configs.toml beside this file."""
