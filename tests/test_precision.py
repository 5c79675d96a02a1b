"""rlib.precision: the presets' "auto" resolves to what the machine computes natively, once, at config build."""

from __future__ import annotations

import pytest

from rlib import precision
from rlib.config import ConfigError
from rlib.mor.config import MoRConfig


def test_auto_follows_the_hardware(monkeypatch):
    assert precision.resolve("bf16") == "bf16" and precision.resolve("no") == "no"  # explicit values are kept
    for native, expected in ((True, "bf16"), (False, "no")):
        monkeypatch.setattr(precision, "bf16_native", lambda native=native: native)
        assert precision.resolve("auto") == expected
        # a chapter config resolves its field when built, so its run keys carry the precision actually used
        assert MoRConfig.preset("smoke").precision == expected
    with pytest.raises(ConfigError, match="precision='fp8'"):
        precision.resolve("fp8")
    with pytest.raises(ConfigError, match="precision='fp8'"):
        MoRConfig.preset("smoke").override(precision="fp8")


def test_describe_names_the_machine():
    info = precision.describe()
    assert info["auto"] == ("bf16" if info["bf16_native"] else "no") and info["cpu_capability"]
