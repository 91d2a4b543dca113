"""Reference: which SM ran each block. There are no inputs: the grader passes the case's size (and the
device to build the answer on) by keyword.

The SM a block runs on is the hardware scheduler's choice, so sm_ids has no single right answer:
spec.toml names `check_sm_ids` below to judge it by the properties every right answer has, instead of
comparing it with reference()'s placeholder. block_ids has one right answer and is compared exactly."""

import torch

MORE_THAN_ONE_SM = 2  # blocks per SM from which a grid has run on more than one SM
MOST_SMS = 64  # blocks per SM from which a grid has reached at least half of the SMs


def reference(*, blocks: int, device: str = "cpu"):
    sm_ids = torch.zeros(blocks, dtype=torch.int32, device=device)  # a placeholder: check_sm_ids judges sm_ids
    block_ids = torch.arange(blocks, dtype=torch.int32, device=device)
    return sm_ids, block_ids


def check_sm_ids(got: torch.Tensor, *, params: dict, device: dict) -> str | None:
    """None when sm_ids could have come from %smid on this GPU, else what is wrong and what to do."""
    sms = int(device.get("multiprocessors") or 0)  # 0: not known here (no GPU), the range is not checked
    ids = got.long().flatten()
    where = 'read it in each block with asm volatile("mov.u32 %0, %%smid;" : "=r"(id))'
    outside = (ids < 0) | (ids >= sms) if sms else ids < 0
    if bool(outside.any()):
        first = int(outside.nonzero()[0])
        return (
            f"{int(outside.sum())} of {ids.numel()} SM ids are outside [0, {sms or 'number of SMs'}) — first "
            f"sm_ids[{first}] = {int(ids[first])}; this GPU has {sms or 'some'} SMs. Is it %smid you read ({where})? "
            "blockIdx.x, %nsmid or a thread index are not an SM's number"
        )
    blocks = int(params["blocks"])
    distinct = int(ids.unique().numel())
    if sms and blocks >= MORE_THAN_ONE_SM * sms and distinct == 1:
        return (
            f"all {blocks} blocks report SM {int(ids[0])}: a grid of {blocks} blocks on {sms} SMs runs on many of "
            f"them. Does every block write its own %smid ({where}), with one block per element "
            "(<<<blocks, threads>>>, not one block looping over them)?"
        )
    if sms and blocks >= MOST_SMS * sms and distinct < sms // 2:
        return (
            f"the {blocks} blocks report only {distinct} different SMs of this GPU's {sms}: a grid this large "
            f"reaches (nearly) all of them. Is it %smid you read ({where})? %warpid and %laneid number warps and "
            "lanes inside one SM"
        )
    return None
