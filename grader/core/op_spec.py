"""The spec side of an operator's checks (spec.toml `[checks]`, run by op_checks.py): which checks a table
asks for and how it is parsed. Loading a spec imports this, never op_checks (torch, the checks themselves)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grader.core.errors import SpecError
from grader.core.spec_keys import CHECKS_KEYS
from grader.core.vocabulary import CheckName

CHECKS = (CheckName.OPERATOR, CheckName.OPCHECK, CheckName.TORCH_COMPILE, CheckName.GRADIENTS)
_SCHEMA = re.compile(r"^(?P<namespace>[A-Za-z_]\w*)::(?P<name>[A-Za-z_]\w*)\(.*\) -> .+$")
GRADCHECK_ELEMENTS = 256  # gradcheck calls forward twice per input element: only tiny cases run it


@dataclass
class OpChecks:
    schema: (
        str | None
    )  # "kcourse::name(Tensor x, ...) -> Tensor": what torch.ops.kcourse.name.default._schema must print;
    # None for a plain torch.autograd.Function (autograd_function = true): no operator to check
    autograd: bool = False  # the backward is registered too (register_autograd): gradients are checked
    gradcheck: bool = False  # torch.autograd.gradcheck in float64 on the small marked cases (the kernels take float64)
    kernel_backward: bool = False  # the backward must compute with the learner's kernels, not torch's operators

    @property
    def names(self) -> tuple[str, ...]:
        """The checks this table asks for, in CHECKS' order."""
        if self.schema is None:
            return ("gradients",)
        return tuple(n for n in CHECKS if n != "gradients" or self.autograd)

    @property
    def qualname(self) -> str:
        return self.schema.split("(", 1)[0]

    @property
    def namespace(self) -> str:
        return self.qualname.split("::")[0]

    @property
    def name(self) -> str:
        return self.qualname.split("::")[1]


def parse(raw: dict[str, Any] | None, where: str) -> OpChecks | None:
    """spec.toml's [checks] table (None when absent)."""
    if raw is None:
        return None
    unknown = sorted(set(raw) - set(CHECKS_KEYS))  # the keys spec_keys.py documents, the docs' reference
    if raw.get("autograd_function") is True and "custom_op" not in raw and not unknown:
        return OpChecks(
            schema=None,
            autograd=True,
            gradcheck=bool(raw.get("gradcheck", False)),
            kernel_backward=bool(raw.get("kernel_backward", True)),
        )
    if unknown or not isinstance(raw.get("custom_op"), str) or not _SCHEMA.match(raw["custom_op"]):
        raise SpecError(
            f'{where}: [checks] takes custom_op = "namespace::name(Tensor x, ...) -> Tensor" (the schema '
            f"torch prints for the operator) and autograd = true|false, or autograd_function = true for a "
            f"plain torch.autograd.Function; either with gradcheck = true|false and "
            f"kernel_backward = true|false" + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return OpChecks(
        schema=raw["custom_op"],
        autograd=bool(raw.get("autograd", False)),
        gradcheck=bool(raw.get("gradcheck", False)),
        kernel_backward=bool(raw.get("kernel_backward", False)),
    )
