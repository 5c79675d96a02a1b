"""A chapter's papermill parameters: read from its percent `.py`, and validated before anything runs.

The parameters cell (`# %% tags=["parameters"]`) holds annotated literals with a help comment:

    profile: str = "smoke"  # smoke | cpu | gpu | paper
    n_eval_windows: int | None = None  # None keeps the preset

Papermill only warns about unknown names and injects them anyway, so the runner checks names and
types itself, from the source text alone (no kernel, no heavy imports: a bad value fails in < 1 s).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlib.config import ConfigError

MANDATORY = ("profile", "out_dir", "seed")
_CELL = re.compile(r"^# %%.*tags=\[[^\]]*[\"']parameters[\"'][^\]]*\].*$", re.M)
_TYPES = {"str": str, "int": int, "float": float, "bool": bool}


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str  # "int", "float", "str", "bool"
    optional: bool  # `X | None`
    default: Any
    help: str

    @property
    def type_text(self) -> str:
        return f"{self.type} | None" if self.optional else self.type


def parameters_cell(source: str, where: str = "notebook") -> str:
    """The text of the single cell tagged `parameters`."""
    starts = list(_CELL.finditer(source))
    if len(starts) != 1:
        raise ConfigError(f"{where}: expected exactly one `# %% tags=[\"parameters\"]` cell, found {len(starts)}")
    body = source[starts[0].end():]
    nxt = re.search(r"^# %%", body, re.M)
    return body[: nxt.start()] if nxt else body


def _annotation(node: ast.expr, where: str, name: str) -> tuple[str, bool]:
    text = ast.unparse(node).replace(" ", "")
    optional = text.endswith("|None") or (text.startswith("Optional[") and text.endswith("]"))
    base = text.removesuffix("|None").removeprefix("Optional[").removesuffix("]") if optional else text
    if base not in _TYPES:
        raise ConfigError(f"{where}: parameter {name!r} has type {text!r}; use str, int, float or bool (| None)")
    return base, optional


def declared(path: Path) -> dict[str, Parameter]:
    """Parameters of the chapter at `path`, with types, defaults and help, in cell order."""
    source = path.read_text()
    where = path.name
    cell = parameters_cell(source, where)
    lines = cell.splitlines()
    params: dict[str, Parameter] = {}
    for node in ast.parse(cell).body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name) or node.value is None:
            raise ConfigError(f"{where}: the parameters cell may only hold `name: type = literal  # help` lines")
        name = node.target.id
        base, optional = _annotation(node.annotation, where, name)
        try:
            default = ast.literal_eval(node.value)
        except ValueError:
            raise ConfigError(
                f"{where}: parameter {name!r} must default to a literal, not {ast.unparse(node.value)}"
            ) from None
        line = lines[node.lineno - 1]
        help_text = line.split("#", 1)[1].strip() if "#" in line else ""
        params[name] = Parameter(name, base, optional, default, help_text)
        check_value(params[name], default, where)
    missing = [m for m in MANDATORY if m not in params]
    if missing:
        raise ConfigError(f"{where}: the parameters cell lacks the mandatory parameter(s) {missing}")
    return params


def check_value(param: Parameter, value: Any, where: str) -> Any:
    """Return `value` if it fits the declared type (ints are accepted for floats), else raise."""
    if value is None and param.optional:
        return None
    want = _TYPES[param.type]
    ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ConfigError(
            f"{where}: parameter {param.name!r} must be {param.type_text}, got {value!r} ({type(value).__name__})"
        )
    return value


def parse_cli_value(param: Parameter, text: str, where: str) -> Any:
    """Turn `-p name=text` into a typed value for `param`, or raise naming the bad value."""
    if text == "None" and param.optional:
        return None
    try:
        if param.type == "str":
            return text
        if param.type == "bool":
            lowered = text.lower()
            if lowered not in ("true", "false", "1", "0"):
                raise ValueError
            return lowered in ("true", "1")
        return _TYPES[param.type](text)
    except ValueError:
        raise ConfigError(
            f"{where}: parameter {param.name!r} must be {param.type_text}, got {text!r}"
        ) from None


def split_assignments(items: list[str]) -> dict[str, str]:
    """`["a=1", "b=x"]` -> `{"a": "1", "b": "x"}`; a malformed item is an error."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"-p {item!r}: write parameters as NAME=VALUE")
        out[name.strip()] = value
    return out
