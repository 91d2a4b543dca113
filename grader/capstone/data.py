"""The training text as bytes, and the batches every run draws from it in the same order.

The default text is generated here (sentences from a small grammar: nothing to download, nobody's copyright,
the same bytes on every machine), as long as the configuration's `text_bytes`; `--data FILE` trains on any
text file instead, such as tinyshakespeare's input.txt."""

from __future__ import annotations

import random
from pathlib import Path

import torch

DEFAULT_BYTES = 48_000
_SUBJECTS = [
    "the kernel",
    "a warp",
    "the block",
    "each thread",
    "the grid",
    "the scheduler",
    "a program",
    "the learner",
    "the compiler",
    "every row",
    "the tile",
    "the cache",
    "a stream",
    "the model",
]
_VERBS = [
    "reads",
    "writes",
    "loads",
    "stores",
    "reduces",
    "sums",
    "scales",
    "masks",
    "copies",
    "tiles",
    "fuses",
    "launches",
    "waits for",
    "checks",
    "normalises",
]
_OBJECTS = [
    "the row",
    "a tile of memory",
    "the shared buffer",
    "its registers",
    "the next block",
    "sixteen bytes",
    "the partial sums",
    "the softmax",
    "the gradient",
    "the weights",
    "the attention scores",
    "the residual stream",
    "the last column",
    "every element",
]
_ENDINGS = [
    "before the barrier",
    "in one pass",
    "without a race",
    "at full bandwidth",
    "while others wait",
    "in float32",
    "with a mask",
    "from global memory",
    "into shared memory",
    "once per step",
]


def default_text(size: int = DEFAULT_BYTES, seed: int = 1234) -> str:
    """Sentences of the grammar subject verb object [ending], a paragraph break now and then."""
    rng = random.Random(seed)
    parts, length = [], 0
    while length < size:
        sentence = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
        if rng.random() < 0.6:
            sentence += " " + rng.choice(_ENDINGS)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice([".", ".", ".", "?", "!"])
        sentence += "\n\n" if rng.random() < 0.1 else " "
        parts.append(sentence)
        length += len(sentence)
    return "".join(parts)[:size]


def load_bytes(path: Path | None, size: int = DEFAULT_BYTES) -> torch.Tensor:
    """The text's bytes as int64 token ids (`size` bytes of the default text where no file is given)."""
    raw = Path(path).read_bytes() if path else default_text(size).encode()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)


class Batches:
    """Batch `step` of every run: the same windows of the text, drawn from a generator seeded by (seed, step).

    The windows' starts are drawn for CHUNK_STEPS steps at once and copied to the device in one go, so a step
    copies nothing from the host: a copy per step from pageable memory waited for the GPU to finish the work
    queued before it (CUDA's rule), and one from pinned memory allocated page-locked memory, which may wait too."""

    CHUNK_STEPS = 1024  # a capstone's timed steps all come from the first chunk, drawn during the warm-up

    def __init__(self, tokens: torch.Tensor, batch: int, context: int, seed: int, device: str):
        if tokens.numel() < context + 2:
            raise ValueError(
                f"the text has {tokens.numel()} bytes; the model's context needs at least {context + 2}: "
                "give a longer file with --data"
            )
        self.tokens, self.batch, self.context, self.seed = tokens.to(device), batch, context, seed
        self.window = torch.arange(context + 1, device=device)
        self._chunk, self._starts = -1, None

    def starts(self, step: int) -> torch.Tensor:
        """The first token of each of step's windows (on the CPU)."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        return torch.randint(0, self.tokens.numel() - self.context - 1, (self.batch,), generator=gen)

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk, row = divmod(step, self.CHUNK_STEPS)
        if chunk != self._chunk:
            first = chunk * self.CHUNK_STEPS
            drawn = torch.stack([self.starts(s) for s in range(first, first + self.CHUNK_STEPS)])
            self._chunk, self._starts = chunk, drawn.to(self.tokens.device)
        rows = self.tokens[self._starts[row][:, None] + self.window]
        return rows[:, :-1], rows[:, 1:]
