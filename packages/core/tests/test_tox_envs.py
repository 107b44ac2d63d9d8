"""The tox envs run in parallel from one checkout: nothing one env writes may be another's."""

from __future__ import annotations

import configparser
from pathlib import Path

TOX_INI = Path(__file__).resolve().parents[3] / "tox.ini"


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(TOX_INI)
    return parser


def test_caches_live_in_each_env() -> None:
    # Two mypy runs sharing ./.mypy_cache corrupted it: an INTERNAL ERROR in a full parallel run.
    base = _tox()["testenv"]["set_env"]
    for variable in ("PYTHONPYCACHEPREFIX", "MYPY_CACHE_DIR", "COVERAGE_FILE"):
        (line,) = [x for x in base.splitlines() if x.strip().startswith(f"{variable} ")]
        assert "{env_dir}" in line or "{env_tmp_dir}" in line, line


def test_an_env_that_sets_its_own_variables_keeps_the_base_ones() -> None:
    tox = _tox()
    for section in tox.sections():
        if section.startswith("testenv:") and "set_env" in tox[section]:
            assert "{[testenv]set_env}" in tox[section]["set_env"], section
