"""The shared parity generator that scripts/make_parity_*.py build on, loaded as a module: the file
$MAKE_PARITY, by default ../shared/parity/make_parity.py beside this checkout."""
import importlib.util
import os


def load():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("MAKE_PARITY", os.path.join(here, "..", "..", "shared", "parity", "make_parity.py"))
    spec = importlib.util.spec_from_file_location("make_parity", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
