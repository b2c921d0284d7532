"""deploy/kuberay/raycluster.yaml against KubeRay's RayCluster schema and what our workers need.

The schema is the CRD's own (raycluster_crd_v1_schema.yaml beside this file says where from and
what was cut). Like `kubectl apply`'s strict field validation, a field the CRD does not have is
an error, at every level. Then the things the schema cannot know: worker pods that can run the
supervisor (its capabilities, root, no seccomp or AppArmor profile), the image the Dockerfile
builds, and sandbox slots that Ray parses and the pod's resources can hold.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mcp_evalserver.sandbox.docker_engine import SUPERVISOR_CAPABILITIES
from mcp_evalserver.sandbox.ray import SLOTS_RESOURCE
from mcp_evalserver.sandbox.shipping import DEFAULT_SHIPPED_DIR

REPO = Path(__file__).resolve().parents[2]
KUBERAY = REPO / "deploy" / "kuberay"
SCHEMA = Path(__file__).with_name("raycluster_crd_v1_schema.yaml")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
# What a worker's memory must hold (README's sizing, bench/swebench_scale.py): the node's one
# actor, each instance beyond its workspaces (at most 16 MiB, the figure the bench checks),
# and the commands, one evaluation per core at once (SWE-bench runs take 0.5-4 GB each).
NODE_ACTOR_MEMORY = 128 << 20
INSTANCE_MEMORY = 16 << 20
MEMORY_PER_CORE = 2 << 30
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_UNITS |= {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists properties (strict validation)."""
    if isinstance(schema, dict):
        strict = {key: _strict(value) for key, value in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            strict["additionalProperties"] = False
        return strict
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def _validator() -> jsonschema.Draft7Validator:
    schema = _strict(yaml.safe_load(SCHEMA.read_text()))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _manifest() -> dict[str, Any]:
    documents = list(yaml.safe_load_all((KUBERAY / "raycluster.yaml").read_text()))
    assert len(documents) == 1, "raycluster.yaml holds one RayCluster"
    manifest: dict[str, Any] = documents[0]
    return manifest


def _errors(manifest: dict[str, Any]) -> list[str]:
    return sorted(
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in _validator().iter_errors(manifest)
    )


def _bytes(quantity: str | int) -> int:
    match = _QUANTITY.match(str(quantity))
    assert match, f"not a quantity this test reads: {quantity!r}"
    return int(float(match[1]) * _UNITS[match[2]])


def _ray_resources(params: dict[str, str]) -> dict[str, float]:
    """The `resources` start parameter as `ray start --resources` reads it.

    KubeRay pastes the value after `--resources=` into a shell command line, so it is a JSON
    object inside shell quotes: the outer quotes go, the rest must be JSON.
    """
    raw = params["resources"]
    assert raw[:1] == raw[-1:] == '"', f"resources must be quoted: {raw!r}"
    resources: dict[str, float] = json.loads(raw[1:-1].replace('\\"', '"'))
    return resources


def _worker_group() -> dict[str, Any]:
    groups = _manifest()["spec"]["workerGroupSpecs"]
    assert len(groups) == 1, "one worker group (the sandboxes)"
    group: dict[str, Any] = groups[0]
    return group


def test_the_manifest_is_a_ray_cluster_that_kuberay_schema_accepts() -> None:
    manifest = _manifest()
    assert manifest["apiVersion"] == "ray.io/v1"
    assert manifest["kind"] == "RayCluster"
    assert _errors(manifest) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # The field the manifest had: Kubernetes 1.30's, not in this CRD's pod template.
        (
            ("workerGroupSpecs", 0, "template", "spec", "containers", 0, "securityContext",
             "appArmorProfile"),
            {"type": "Unconfined"},
            "'appArmorProfile' was unexpected",
        ),
        (("workerGroupSpecs", 0, "replica"), 4, "'replica' was unexpected"),
        (("workerGroupSpecs", 0, "replicas"), "4", "'4' is not of type 'integer'"),
        (("headGroupSpec", "rayStartParams", "num-cpus"), 0, "0 is not of type 'string'"),
        (
            ("workerGroupSpecs", 0, "template", "spec", "containers", 0, "resources", "limits",
             "memory"),
            "64 GB",
            "does not match",
        ),
    ],
)  # fmt: skip
def test_the_schema_check_refuses_unknown_fields_and_wrong_types(
    path: tuple[str | int, ...], value: Any, expected: str
) -> None:
    manifest = copy.deepcopy(_manifest())
    parent = manifest["spec"]
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    errors = _errors(manifest)
    assert any(expected in error for error in errors), errors


def test_a_group_without_what_the_crd_requires_is_refused() -> None:
    manifest = copy.deepcopy(_manifest())
    del manifest["spec"]["workerGroupSpecs"][0]["groupName"]
    assert any("'groupName' is a required property" in e for e in _errors(manifest))


def test_worker_pods_can_run_the_supervisor() -> None:
    template = _worker_group()["template"]
    (container,) = template["spec"]["containers"]
    security = container["securityContext"]
    added = set(security["capabilities"]["add"])
    missing = set(SUPERVISOR_CAPABILITIES) - added
    assert not missing, f"the supervisor needs {sorted(missing)} too"
    assert security.get("privileged") is not True, "--privileged is more than it needs"
    assert security["runAsUser"] == 0
    assert not security.get("runAsNonRoot")
    assert security["seccompProfile"] == {"type": "Unconfined"}
    annotations = template["metadata"]["annotations"]
    assert annotations[APPARMOR_ANNOTATION + container["name"]] == "unconfined"


def test_head_and_workers_run_the_image_the_dockerfile_builds_with_the_same_ray() -> None:
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    built = re.search(r"docker build -f deploy/kuberay/Dockerfile -t (\S+) \.", dockerfile)
    assert built, "the Dockerfile says how it is built and tagged"
    base = re.search(r"^FROM rayproject/ray:([\d.]+)-py", dockerfile, re.MULTILINE)
    assert base, "the image is Ray's own"
    assert re.search(r"pip install .*\[ray\]", dockerfile), "with mcp-evalserver's ray extra"
    manifest = _manifest()
    assert manifest["spec"]["rayVersion"] == base[1]
    templates = [manifest["spec"]["headGroupSpec"]["template"], _worker_group()["template"]]
    images = {c["image"] for t in templates for c in t["spec"]["containers"]}
    assert {image.split(":")[0] for image in images} == {built[1]}


def test_only_workers_offer_sandbox_slots_and_their_pods_can_hold_them() -> None:
    head = _manifest()["spec"]["headGroupSpec"]
    assert _ray_resources(head["rayStartParams"]) == {SLOTS_RESOURCE: 0}
    group = _worker_group()
    slots = _ray_resources(group["rayStartParams"])[SLOTS_RESOURCE]
    assert slots >= 1
    assert slots == int(slots)
    (container,) = group["template"]["spec"]["containers"]
    resources = container["resources"]
    # Requests equal to limits: a Guaranteed pod, the last one the node evicts under pressure.
    assert resources["requests"] == resources["limits"]
    cores = float(group["rayStartParams"]["num-cpus"])
    assert cores == float(resources["limits"]["cpu"])
    needed = NODE_ACTOR_MEMORY + slots * INSTANCE_MEMORY + cores * MEMORY_PER_CORE
    assert _bytes(resources["limits"]["memory"]) >= needed
    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_every_mount_names_a_volume_and_shipped_paths_are_recorded_on_one() -> None:
    spec = _worker_group()["template"]["spec"]
    (container,) = spec["containers"]
    volumes = {volume["name"] for volume in spec["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert set(mounts.values()) <= volumes
    assert any(Path(DEFAULT_SHIPPED_DIR).is_relative_to(path) for path in mounts)


def test_the_readme_states_the_instances_per_node_the_manifest_offers() -> None:
    slots = int(_ray_resources(_worker_group()["rayStartParams"])[SLOTS_RESOURCE])
    readme = (KUBERAY / "README.md").read_text()
    assert f"**{slots} instances per node**" in readme
    assert f"`sandbox_slots: {slots}`" in readme
    assert f"`replicas: {_worker_group()['replicas']}`" in readme
