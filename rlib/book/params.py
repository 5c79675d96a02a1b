"""A chapter's papermill parameters: read from its percent `.py`, and validated before anything runs.

The parameters cell (`# %% tags=["parameters"]`) holds annotated literals with a help comment:

    profile: str = "smoke"  # smoke | cpu | gpu | paper
    n_eval_windows: int | None = None  # None keeps the preset

A help comment may end with a range, `[LOW..HIGH]` with either bound left out (`# rows [1..]`);
`profile` must name a profile and `seed` lie in [0..2**32 - 1] without saying so.

Papermill only warns about unknown names and injects them anyway, so the values are checked twice,
with the same messages:
  - by the runner (`python -m rlib.book run -p ...`), from the source text alone, before any kernel
    starts (no heavy imports: a bad value fails in < 1 s);
  - inside the notebook, by `check_parameters(globals())` in the cell right after the parameters cell:
    it reads the parameters cell and papermill's injected cell from the kernel's input history, so a
    stock `papermill nb.py out.ipynb -p ...` and JupyterLab get the same error before any work and
    before any output file is written.
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
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"\[\s*(?P<low>{_NUMBER})?\s*\.\.\s*(?P<high>{_NUMBER})?\s*\]\s*$")
_BUILTIN_RANGES = {"seed": (0, 2**32 - 1)}  # numpy's seeds
INJECTED_HEADER = "# Parameters"  # the first line of the cell papermill injects


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str  # "int", "float", "str", "bool"
    optional: bool  # `X | None`
    default: Any
    help: str
    low: float | None = None  # inclusive bounds of a number, from `[LOW..HIGH]` at the end of the help
    high: float | None = None

    @property
    def range_text(self) -> str:
        show = lambda v: "" if v is None else (str(int(v)) if float(v).is_integer() else f"{v:g}")
        return f"[{show(self.low)}..{show(self.high)}]"

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
    return parse_cell(parameters_cell(path.read_text(), path.name), path.name)


def _is_parameters_cell(cell: str) -> bool:
    """Whether `cell` looks like a parameters cell: only `name: type = value` lines, the mandatory names among them."""
    try:
        body = ast.parse(cell).body
    except SyntaxError:
        return False
    names = {n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return bool(body) and all(isinstance(n, ast.AnnAssign) for n in body) and set(MANDATORY) <= names


def parse_cell(cell: str, where: str) -> dict[str, Parameter]:
    """The parameters declared by the text of a parameters cell; a malformed cell is a ConfigError."""
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
        low, high = _BUILTIN_RANGES.get(name, (None, None))
        if (bounds := _RANGE.search(help_text)) and base in ("int", "float"):
            low = float(bounds["low"]) if bounds["low"] else None
            high = float(bounds["high"]) if bounds["high"] else None
        params[name] = Parameter(name, base, optional, default, help_text, low, high)
        check_value(params[name], default, where)
    missing = [m for m in MANDATORY if m not in params]
    if missing:
        raise ConfigError(f"{where}: the parameters cell lacks the mandatory parameter(s) {missing}")
    return params


def check_value(param: Parameter, value: Any, where: str) -> Any:
    """Return `value` if it fits the declared type and range (ints are accepted for floats), else raise."""
    if value is None and param.optional:
        return None
    want = _TYPES[param.type]
    ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        hint = " (papermill: pass strings with -r NAME VALUE)" if want is str else ""
        raise ConfigError(
            f"{where}: parameter {param.name!r} must be {param.type_text}, got {value!r} ({type(value).__name__})"
            + hint
        )
    if want in (int, float) and ((param.low is not None and value < param.low)
                                 or (param.high is not None and value > param.high)):
        raise ConfigError(f"{where}: parameter {param.name!r} = {value!r} is out of its range {param.range_text}")
    if param.name == "profile":
        from rlib.config import PROFILES

        if value not in PROFILES:
            raise ConfigError(f"{where}: parameter 'profile' = {value!r} is not a profile; "
                              f"choose one of: {', '.join(PROFILES)}")
    return value


def unknown_parameter(name: str, known, why: str) -> ConfigError:
    """The one message for a parameter nobody declares, from the runner and from inside a notebook alike."""
    names = sorted(set(known) - {"profile", "out_dir"})
    return ConfigError(f"unknown parameter {name!r}: {why}. Known parameters: {', '.join(names)} "
                       "(see `python -m rlib.book params`)")


def _assigned_names(cell: str) -> list[str]:
    try:
        body = ast.parse(cell).body
    except SyntaxError:
        return []
    return [t.id for node in body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)]


def check_parameters(namespace: dict[str, Any]) -> dict[str, Any]:
    """Validate the parameters of the running notebook; call it as `check_parameters(globals())` in the cell right
    after the parameters cell. Raises ConfigError (before any work) on an unknown name papermill injected, a wrong
    type or an out-of-range value; returns the checked values (ints given for floats become floats in place)."""
    import os

    where = os.environ.get("JPY_SESSION_NAME") or "notebook"
    history = namespace.get("In") or namespace.get("_ih")
    if history:  # a Jupyter kernel: the latest parameters cell, then what papermill injected after it
        cells = [c for c in history if isinstance(c, str) and c.strip()]
        starts = [i for i, c in enumerate(cells) if _is_parameters_cell(c)]
        if not starts:
            raise ConfigError(f"{where}: no parameters cell has run in this kernel; run the parameters cell first")
        declared_here = parse_cell(cells[starts[-1]], where)
        injected = [n for c in cells[starts[-1] + 1:] if c.lstrip().startswith(INJECTED_HEADER)
                    for n in _assigned_names(c)]
    elif namespace.get("__file__"):  # the percent .py run as a plain script: nothing can be injected
        declared_here, injected = declared(Path(namespace["__file__"])), []
    else:
        raise ConfigError("check_parameters: call it as check_parameters(globals()) in a notebook or chapter script")
    for name in injected:
        if name not in declared_here:
            raise unknown_parameter(name, declared_here, f"{where} declares no such parameter")
    checked = {}
    for param in declared_here.values():
        if param.name not in namespace:
            raise ConfigError(f"{where}: parameter {param.name!r} is not defined; run the parameters cell first")
        checked[param.name] = namespace[param.name] = check_value(param, namespace[param.name], where)
    return checked


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
