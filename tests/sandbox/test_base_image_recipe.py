"""The base image recipe takes its Debian mirror from the machine, never from the repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "sandbox_images" / "build-base.sh"

DEB822 = """\
Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://sources.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Enabled: no

Types: deb
# a comment inside the stanza
URIs: http://mirror.example/debian http://second.example/debian
Suites: bookworm bookworm-updates
Components: main
"""


def _print_mirror(apt_etc: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "--print-mirror"],
        env={"PATH": "/usr/bin:/bin", "APT_ETC": str(apt_etc), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_recipe_names_no_package_host() -> None:
    assert "://" not in SCRIPT.read_text()


def test_the_mirror_is_the_first_enabled_bookworm_deb_source_of_a_deb822_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    done = _print_mirror(tmp_path)
    assert (done.returncode, done.stdout) == (0, "http://mirror.example/debian\n"), done.stderr


def test_the_mirror_is_read_from_a_one_line_sources_list_with_options(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://list.example/debian bookworm main\n"
    )
    done = _print_mirror(tmp_path)
    assert (done.returncode, done.stdout) == (0, "http://list.example/debian\n"), done.stderr


def test_debian_mirror_overrides_the_apt_configuration(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://list.example/debian bookworm main\n")
    done = _print_mirror(tmp_path, DEBIAN_MIRROR="http://chosen.example/debian")
    assert done.stdout == "http://chosen.example/debian\n"


def test_without_a_bookworm_source_the_error_says_to_set_debian_mirror(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://list.example/ubuntu noble main\n")
    done = _print_mirror(tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert f"no bookworm source in {tmp_path}: set DEBIAN_MIRROR=" in done.stderr
