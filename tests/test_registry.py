"""The method registry's loading: a look-up of one built-in name imports that method's file
only (the CLI's first look-up no longer imports every method), a name registered by a module
of another name and `list_methods` still find everything, and an unknown name lists them all.
Each case runs in a fresh interpreter, since this process has long loaded every method."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from creditbench.methods import registry
result = {}
try:
    result["found"] = registry.get_method(sys.argv[1]).__module__
except registry.UnknownMethodError as err:
    result["error"] = str(err)
loaded = sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("creditbench.methods."))
result["loaded"] = loaded
print(json.dumps(result))
"""


def look_up(name: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, name], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_one_look_up_imports_that_methods_file_and_not_the_others():
    result = look_up("grpo")
    assert result["found"] == "creditbench.methods.grpo"
    assert "ccpo" not in result["loaded"] and "vineppo" not in result["loaded"]


def test_a_name_registered_by_a_module_of_another_name_is_found():
    result = look_up("rrpo")  # registered in resets.py
    assert result["found"] == "creditbench.methods.resets"
    assert "ccpo" in result["loaded"]  # found by loading everything


def test_an_unknown_name_lists_every_method():
    result = look_up("no_such_method")
    assert "unknown method 'no_such_method'" in result["error"]
    assert "vineppo" in result["error"] and "ccpo" in result["error"]
