"""The campaign model: SWE-bench fields as published, clear errors, task files, the schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.sandboxes import instance_spec
from mcp_evalserver.sandbox.base import InstanceSpec
from mcp_evalserver.spec.campaign import (
    CampaignSpec,
    RaySandboxConfig,
    Task,
    load_spec,
    load_tasks,
    parse_spec,
    spec_json_schema,
    trajectory_id,
)

SWE_BENCH_ROW = {
    "repo": "astropy/astropy",
    "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/x b/x\n",
    "test_patch": "diff --git a/t b/t\n",
    "problem_statement": "Modeling's `separability_matrix` does not compute separability",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6]"]',
    "PASS_TO_PASS": "[]",
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
}


def test_a_published_swe_bench_instance_is_a_valid_task() -> None:
    task = Task.model_validate(SWE_BENCH_ROW)
    assert task.id == "astropy__astropy-12907"
    assert task.prompt.startswith("Modeling's")
    assert task.FAIL_TO_PASS == [
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6]"
    ]
    assert task.PASS_TO_PASS == []
    with_image = task.model_copy(
        update={"image": "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907"}
    )
    assert instance_spec(with_image).workdir == "/testbed"
    assert instance_spec(with_image).capabilities == "none"  # only Harbor tasks get Docker's
    asking = with_image.model_copy(update={"capabilities": "container"})
    assert instance_spec(asking).capabilities == "container"  # unless the task asks


def test_a_spec_without_capabilities_keeps_the_key_older_ledgers_hold() -> None:
    plain = InstanceSpec(image="img:1", setup=("true",))
    capable = InstanceSpec(image="img:1", setup=("true",), capabilities="container")
    assert plain.key == "558c62455fa56f84"  # as before the field existed
    assert capable.key != plain.key  # another instance: its commands may do more


@pytest.mark.parametrize(
    ("field", "meant"),
    [("promt", "prompt"), ("fail_to_pass", "FAIL_TO_PASS"), ("eval_scrpt", "eval_script")],
)
def test_a_misspelt_task_field_is_rejected_with_the_field_it_resembles(
    field: str, meant: str
) -> None:
    with pytest.raises(
        InvalidInput, match=rf"unknown task field '{field}': did you mean '{meant}'"
    ):
        parse_spec({"tasks": [{"id": "a", field: "typo"}]})


def test_a_bad_limit_names_the_field_and_the_reason() -> None:
    with pytest.raises(InvalidInput, match=r"limits\.concurrency: must be >= 1 \(got 0\)"):
        parse_spec({"tasks": [{"id": "a"}], "limits": {"concurrency": 0}})


def test_duplicate_task_ids_are_rejected() -> None:
    with pytest.raises(InvalidInput, match="appears twice"):
        parse_spec({"tasks": [{"id": "a"}, {"id": "a"}]})


def test_a_task_id_with_an_at_sign_is_rejected_because_trajectory_ids_use_it() -> None:
    with pytest.raises(InvalidInput, match="no '@'"):
        parse_spec({"tasks": [{"id": "a@1"}]})


@pytest.mark.parametrize("task_id", ["a\n", "a\nb", "\na", "a\r", "a b", "a\x00"])
def test_a_task_id_with_a_line_break_or_a_control_character_is_rejected(task_id: str) -> None:
    with pytest.raises(InvalidInput, match="task ids may hold letters"):
        parse_spec({"tasks": [{"id": task_id}]})


def test_trajectory_ids_are_deterministic() -> None:
    assert trajectory_id("django__django-1", 2) == "django__django-1@2"


def test_a_jsonl_task_file_is_loaded_relative_to_the_spec(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text(
        json.dumps(SWE_BENCH_ROW) + "\n\n" + json.dumps({"id": "b", "answer": "4"}) + "\n"
    )
    (tmp_path / "spec.json").write_text(json.dumps({"tasks": "tasks.jsonl", "samples": 2}))
    spec = load_spec(tmp_path / "spec.json")
    assert [t.id for t in spec.task_list()] == ["astropy__astropy-12907", "b"]


def test_a_json_list_task_file_is_loaded(tmp_path: Path) -> None:
    (tmp_path / "tasks.json").write_text(json.dumps([{"id": "a"}, {"id": "b"}]))
    assert [t.id for t in load_tasks(tmp_path / "tasks.json")] == ["a", "b"]


def test_a_bad_task_line_is_named_with_its_line_number(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"id": "a"}\n{"id": "b@1"}\n')
    with pytest.raises(InvalidInput, match=r"line 2: id: .*task ids may hold"):
        load_tasks(tmp_path / "tasks.jsonl")


def test_a_missing_task_file_says_which_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"nowhere\.jsonl"):
        parse_spec({"tasks": str(tmp_path / "nowhere.jsonl")})


def test_the_exported_schema_describes_agents_scorers_limits_and_the_sandbox() -> None:
    schema = spec_json_schema()
    fields = {"name", "tasks", "samples", "agent", "scorer", "limits", "sandbox", "prices"}
    assert set(schema["properties"]) == fields
    assert "discriminator" in json.dumps(schema["properties"]["agent"])
    # The schema is what the model accepts: a spec validated from it round-trips.
    spec = CampaignSpec.model_validate({"tasks": [{"id": "a"}], "agent": {"type": "oracle"}})
    assert CampaignSpec.model_validate(spec.model_dump(mode="json")) == spec


def test_a_campaign_chooses_its_sandbox_by_type_and_a_wrong_one_is_named() -> None:
    spec = CampaignSpec.model_validate(
        {"tasks": [{"id": "a"}], "sandbox": {"type": "ray", "address": "127.0.0.1:6379"}}
    )
    assert isinstance(spec.sandbox, RaySandboxConfig)
    assert spec.sandbox.address == "127.0.0.1:6379"
    assert CampaignSpec.model_validate({"tasks": [{"id": "a"}]}).sandbox is None
    with pytest.raises(InvalidInput, match="sandbox"):
        parse_spec({"tasks": [{"id": "a"}], "sandbox": {"type": "kubernetes"}})


def test_a_task_keeps_fields_it_does_not_know_in_its_metadata_its_own_metadata_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    row = {"id": "a", "language": "Python", "source": "row", "metadata": {"source": "own"}}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(tmp_path / "tasks.jsonl")
    assert task.metadata == {"language": "Python", "source": "own"}
    assert "language, source are not task field(s)" in caplog.text
    caplog.clear()
    inline = parse_spec(json.dumps({"tasks": [row]})).task_list()[0]
    assert inline.metadata == task.metadata, "a spec's inline tasks follow the same rule"
    assert "the spec's tasks: language, source are not task field(s)" in caplog.text
    task_schema = spec_json_schema()["$defs"]["Task"]
    assert task_schema.get("additionalProperties", True), "the schema must not refuse them"
