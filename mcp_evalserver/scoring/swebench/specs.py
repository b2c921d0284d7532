"""SWE-bench's per repository and version setup steps of an eval script, for tasks without one.

SWE-bench built each eval script from `MAP_REPO_VERSION_TO_SPECS_PY[repo][version]`
(`swebench/harness/constants/python.py`) in `make_eval_script_list`: activate the `testbed`
conda environment, `cd` to the repository, the spec's `eval_commands` (Django's locale
exports), informational git commands, activate again, the spec's `install` (so a patch to
compiled or installed code is what the tests import: Django up to 2.2 installs a copy with
`python setup.py install`, scikit-learn rebuilds its extensions), then reset and apply the
test patch and run the tests between the markers. `swebench==5.0.2` ships eval scripts inside
its instances and no longer carries these specs; this table is copied from the release that
last did, for the repositories SWE-bench (and `test_plans`) knows. A version not listed gets
no setup steps beyond the environment.
"""

from __future__ import annotations

_PIP_EDITABLE = "python -m pip install -e ."

_DJANGO_OLD_LOCALE = (
    "export LANG=en_US.UTF-8",
    "export LC_ALL=en_US.UTF-8",
    "export PYTHONIOENCODING=utf8",
    "export LANGUAGE=en_US:en",
)
_DJANGO_LOCALE = (
    "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
    "export LANG=en_US.UTF-8",
    "export LANGUAGE=en_US:en",
    "export LC_ALL=en_US.UTF-8",
)


def _versions(*groups: str) -> tuple[str, ...]:
    return tuple(v for group in groups for v in group.split())


#: (repository, versions, eval_commands, install): the spec entries that differ by version;
#: SWE-bench's table, row for row.
_SPECS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    ("astropy/astropy", _versions("0.1 0.2 0.3 0.4 1.1 1.2 1.3 3.0 3.1 3.2 4.1 4.2 4.3",
                                  "5.0 5.1 5.2 v5.3"),
     (), "python -m pip install -e .[test] --verbose"),
    ("django/django", _versions("1.4 1.5 1.6"), (), "python setup.py install"),
    ("django/django", _versions("1.7 1.8 1.9 1.10 1.11 2.0 2.1 2.2"), _DJANGO_OLD_LOCALE,
     "python setup.py install"),
    ("django/django", _versions("3.0 3.1 3.2"), _DJANGO_LOCALE, _PIP_EDITABLE),
    ("django/django", _versions("4.0 4.1 4.2 5.0 5.1 5.2"), (), _PIP_EDITABLE),
    ("marshmallow-code/marshmallow", _versions("2.18 2.19 2.20 3.0 3.1 3.2 3.4 3.8 3.9",
                                               "3.10 3.11 3.12 3.13 3.15 3.16 3.19"),
     (), "python -m pip install -e '.[dev]'"),
    ("matplotlib/matplotlib", _versions("1.0 1.1 1.2 1.3 1.4 1.5 2.0 2.1 2.2"), (),
     "python setup.py build; python setup.py install"),
    ("matplotlib/matplotlib", _versions("3.0 3.1 3.2 3.3 3.4 3.5 3.6 3.7"), (), _PIP_EDITABLE),
    ("matplotlib/matplotlib", _versions("3.8 3.9"), (),
     'python -m pip install --no-build-isolation -e ".[dev]"'),
    ("mwaskom/seaborn", _versions("0.11"), (), _PIP_EDITABLE),
    ("mwaskom/seaborn", _versions("0.12 0.13 0.14"), (), "python -m pip install -e .[dev]"),
    ("pallets/flask", _versions("2.0 2.1 2.2 2.3 3.0 3.1"), (), _PIP_EDITABLE),
    ("psf/requests", _versions("0.7 0.8 0.9 0.11 0.13 0.14 1.1 1.2 2.0 2.2 2.3 2.4 2.5 2.7",
                               "2.8 2.9 2.10 2.11 2.12 2.17 2.18 2.19 2.22 2.25 2.26 2.27",
                               "2.31 3.0"),
     (), "python -m pip install ."),
    ("pvlib/pvlib-python", _versions("0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9"), (),
     "python -m pip install -e .[all]"),
    ("pydata/xarray", _versions("0.12 0.18 0.19 0.20 2022.03 2022.06 2022.09 2023.07",
                                "2024.05"),
     (), _PIP_EDITABLE),
    ("pydicom/pydicom", _versions("1.0 1.1 1.2 1.3 1.4 2.0 2.1 2.2 2.3 2.4 3.0"), (),
     _PIP_EDITABLE),
    ("pylint-dev/astroid", _versions("2.5 2.6 2.7 2.8 2.9 2.10 2.12 2.13 2.14 2.15 2.16",
                                     "3.0"),
     (), _PIP_EDITABLE),
    ("pylint-dev/pylint", _versions("2.8 2.9 2.10 2.11 2.13 2.14 2.15 2.16 2.17 3.0 3.1",
                                    "3.2 3.3 4.0"),
     (), _PIP_EDITABLE),
    ("pytest-dev/pytest", _versions("4.4 4.5 4.6 5.0 5.1 5.2 5.3 5.4 6.0 6.2 6.3 7.0 7.1",
                                    "7.2 7.4 8.0 8.1 8.2 8.3 8.4"),
     (), _PIP_EDITABLE),
    ("pyvista/pyvista", _versions("0.20 0.21 0.22 0.23 0.24 0.25 0.26 0.27 0.28 0.29 0.30",
                                  "0.31 0.32 0.33 0.34 0.35 0.36 0.37 0.38 0.39 0.40 0.41",
                                  "0.42 0.43"),
     (), _PIP_EDITABLE),
    ("scikit-learn/scikit-learn", _versions("0.20 0.21 0.22 1.3 1.4 1.5 1.6"), (),
     "python -m pip install -v --no-use-pep517 --no-build-isolation -e ."),
    ("sphinx-doc/sphinx", _versions("1.5 1.6 1.7 1.8 2.0 2.1 2.2 2.3 2.4 3.0 3.1 3.2 3.3",
                                    "3.4 3.5 4.0 4.1 4.2 4.3 4.4 4.5 5.0 5.1 5.2 5.3 6.0",
                                    "6.2 7.0 7.1 7.2 7.3 7.4 8.0 8.1"),
     (), "python -m pip install -e .[test]"),
    ("sqlfluff/sqlfluff", _versions("0.4 0.5 0.6 0.8 0.9 0.10 0.11 0.12 0.13 1.0 1.1 1.2",
                                    "1.3 1.4 2.0 2.1 2.2"),
     (), _PIP_EDITABLE),
    ("sympy/sympy", _versions("0.7 1.0 1.1 1.2 1.4 1.5 1.6 1.7 1.8 1.9 1.10 1.11 1.12",
                              "1.13 1.14"),
     (), _PIP_EDITABLE),
)  # fmt: skip

_BY_VERSION: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    (repo, version): (eval_commands, install)
    for repo, versions, eval_commands, install in _SPECS
    for version in versions
}


def swebench_setup(repo: str | None, version: str | None) -> list[str]:
    """The lines SWE-bench's eval script runs for `repo` at `version` between activating its
    environment and the test section: the spec's `eval_commands`, then its `install` (none
    for a repository or version SWE-bench has no spec for)."""
    spec = _BY_VERSION.get((repo or "", version or ""))
    if spec is None:
        return []
    eval_commands, install = spec
    return [*eval_commands, install]
