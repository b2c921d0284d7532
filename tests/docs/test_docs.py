"""The README and the docs site stay short, true to the repository and citable.

`make docs` builds the site with `mkdocs build --strict` (links, anchors, nav); these check what
mkdocs cannot see: the README, and the source files that cite a page.
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()


def _fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_readme_stays_within_two_hundred_lines() -> None:
    lines = len(README.splitlines())
    assert lines <= 200, f"README.md has {lines} lines: move the detail to a page under docs/"


def test_the_readmes_minimal_spec_is_the_example_spec_file() -> None:
    spec = json.loads(_fenced(README, "json")[0])
    assert spec == json.loads((ROOT / "examples" / "answers-oracle.json").read_text())


def test_the_readmes_client_configs_are_the_ones_in_clients_configs() -> None:
    shipped = [
        json.loads(path.read_text()) for path in sorted((ROOT / "clients" / "configs").iterdir())
    ]
    configs = [json.loads(block) for block in _fenced(README, "json")[1:]]
    assert configs, "the README shows no client config"
    for config in configs:
        assert config in shipped, f"not in clients/configs/: {config}"


def test_every_docs_page_a_file_cites_exists() -> None:
    cited: dict[str, list[str]] = {}
    for folder in ("mcp_evalserver", "tests", "testsupport", "bench", "scripts", "demo", "clients"):
        for path in (ROOT / folder).rglob("*"):
            skip = path == Path(__file__) or "build" in path.parts
            if skip or path.suffix not in {".py", ".c", ".sh", ".md", ".yaml"}:
                continue
            for page in re.findall(r"\bdocs/[\w./-]+?\.md\b", path.read_text(errors="replace")):
                cited.setdefault(page, []).append(str(path.relative_to(ROOT)))
    missing = {page: files for page, files in cited.items() if not (ROOT / page).is_file()}
    assert not missing, f"cited pages that do not exist: {missing}"
    citing = cited.get("docs/design/isolation.md", [])
    assert any(file.startswith("mcp_evalserver/") for file in citing), "the threat model's page"
