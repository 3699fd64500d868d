"""The parity cases of ``experiments/parity/cases.py`` (tiny Hugging Face references) importable as
``cases`` by the tests of this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "parity"))
