"""SWE-bench 5.0.2's log parsers for its other languages (SWE-bench Multilingual's and
Multimodal's: JavaScript/TypeScript, C/C++, Go, Java, PHP, Ruby, Rust), ported line for line
from `swebench/harness/log_parsers/`, and the tables that choose them.

`PARSERS` holds every name swebench's `PARSER_REGISTRY` registers for these languages, plus the
parsers its per-repository tables name (`MAP_REPO_TO_PARSER_*`); `REPO_PARSERS` is those tables
merged. A few parsers read the instance (its id or version) to choose a format, as swebench's
read its TestSpec: `bound` gives them the task's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mcp_evalserver.scoring.swebench.multilingual.third_party import (
    c,
    go,
    java,
    javascript,
    php,
    ruby,
    rust,
)
from mcp_evalserver.scoring.swebench.multilingual.third_party._shared import TestSpec

#: A ported parser as swebench calls it: the log and the instance, a status word per test id.
RawParser = Callable[[str, TestSpec], dict[str, str]]

_REGISTERED: tuple[RawParser, ...] = (
    javascript.parse_log_calypso, javascript.parse_log_bpmn_js, javascript.parse_log_carbon,
    javascript.parse_log_eslint, javascript.parse_log_grommet, javascript.parse_log_highlightjs,
    javascript.parse_log_lighthouse, javascript.parse_log_next, javascript.parse_log_openlayers,
    javascript.parse_log_prismjs, javascript.parse_log_quarto_cli, javascript.parse_log_chart_js,
    javascript.parse_log_marked, javascript.parse_log_p5js, javascript.parse_log_react_pdf,
    javascript.parse_log_jest, javascript.parse_log_jest_json, javascript.parse_log_vitest,
    javascript.parse_log_karma, javascript.parse_log_tap, javascript.parse_log_immutable_js,
    c.parse_log_redis, c.parse_log_jq, c.parse_log_doctest, c.parse_log_micropython_test,
    c.parse_log_googletest,
    go.parse_log_gotest,
    java.parse_log_maven, java.parse_log_ant, java.parse_log_gradle_custom,
    php.parse_log_phpunit,
    ruby.parse_log_minitest, ruby.parse_log_cucumber, ruby.parse_log_ruby_unit,
    ruby.parse_log_rspec_transformed_json, ruby.parse_log_jekyll,
    rust.parse_log_cargo,
)  # fmt: skip

#: swebench's repository -> parser tables for these languages, merged.
REPO_PARSERS: dict[str, RawParser] = {
    **javascript.MAP_REPO_TO_PARSER_JS,
    **c.MAP_REPO_TO_PARSER_C,
    **go.MAP_REPO_TO_PARSER_GO,
    **java.MAP_REPO_TO_PARSER_JAVA,
    **php.MAP_REPO_TO_PARSER_PHP,
    **ruby.MAP_REPO_TO_PARSER_RUBY,
    **rust.MAP_REPO_TO_PARSER_RUST,
}


def short_name(parser: RawParser) -> str:
    """A parser's name without swebench's `parse_log_` (or `parse_`) prefix."""
    return parser.__name__.removeprefix("parse_log_").removeprefix("parse_")


#: Every parser by its short name (`jest`, `gotest`, `cargo`, `plotly_js`, ...).
PARSERS: dict[str, RawParser] = {
    short_name(parser): parser for parser in (*_REGISTERED, *REPO_PARSERS.values())
}

#: swebench's repositories graded fail-only (`FAIL_ONLY_REPOS`): a test passes unless the log
#: says it FAILED; their parsers record failures only.
FAIL_ONLY_REPOS = frozenset(
    {
        "chartjs/Chart.js",
        "processing/p5.js",
        "markedjs/marked",
        "bpmn-io/bpmn-js",
        "openlayers/openlayers",
        "eslint/eslint",
    }
)


@dataclass(frozen=True)
class Instance:
    """The fields of a TestSpec a parser may read."""

    instance_id: str
    version: str
