"""infra/terraform held to the google provider's published schema (what `terraform validate` checks).

The schema comes from the pinned `cdktn-provider-google` wheel (tests/harness/google_schemas.py;
`make google-schemas`, which `make test` runs first). Our files give no finding; each kind of
mistake, planted in a copy of our own files, is reported; the pinned provider version is one
versions.tf allows, and the wheel says it is the version the pin names.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.harness import google_schemas
from tests.harness.terraform_schema import EXPRESSION, check_directory, literal, type_problem
from tests.harness.terraform_versions import Constraint, parse_version, required_provider

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "terraform"
VERSIONS_TF = TF_DIR / "versions.tf"

# Resource types no schema here covers, each with why: they stay unchecked, and a new one must be
# named here to pass.
UNCHECKED_TYPES = {
    "time_sleep": "hashicorp/time (main.tf's wait after enabling the APIs); its schema is not fetched",
    "terraform_data": "built into Terraform (functions.tf runs the dead-letter script)",
}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded = google_schemas.load_schema()
    if loaded is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the google provider schema is not derived: {google_schemas.MAKE_HINT}")
        pytest.skip(f"the google provider schema is not derived: {google_schemas.MAKE_HINT}")
    return loaded


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "terraform"
    copy.mkdir()
    for path in TF_DIR.glob("*.tf"):
        shutil.copy(path, copy / path.name)
    return copy


def _declared_blocks() -> set[tuple[str, str, str]]:
    """Every resource and data block, found by a plain scan (independent of python-hcl2)."""
    found = set()
    for path in TF_DIR.glob("*.tf"):
        for m in re.finditer(r'^(resource|data) "(\w+)" "(\w+)"', path.read_text(), re.M):
            found.add((m[1], m[2], m[3]))
    return found


# ------------------------------------------------------------------------------------ our files


def test_our_terraform_gives_no_finding_against_the_provider_schema(schema: dict[str, Any]) -> None:
    report = check_directory(TF_DIR, schema)
    assert not report.findings, "\n".join(map(str, report.findings))
    assert "provider.google" in report.checked
    for section, kind, name in _declared_blocks():
        address = f"{'data.' if section == 'data' else ''}{kind}.{name}"
        assert address in report.checked or kind in report.unchecked, f"{address} was never walked"


def test_only_the_named_types_go_unchecked(schema: dict[str, Any]) -> None:
    report = check_directory(TF_DIR, schema)
    assert report.unchecked == set(UNCHECKED_TYPES), (
        f"unchecked resource types {sorted(report.unchecked)}: name each in UNCHECKED_TYPES with why, "
        "or drop the ones no longer used"
    )


def test_the_schema_is_the_whole_provider(schema: dict[str, Any]) -> None:
    # The jsii assembly of cdktn-provider-google 20.3.1 has 1,346 resource and 465 data-source classes;
    # a reduction that lost some would pass our files by knowing too little.
    assert len(schema["resources"]) >= 1300 and len(schema["data_sources"]) >= 450
    bucket = schema["resources"]["google_storage_bucket"]
    assert bucket["arguments"]["location"] == {"type": "string", "required": True}
    condition = bucket["blocks"]["lifecycle_rule"]["block"]["blocks"]["condition"]
    assert condition["required"] and condition["max_one"]
    assert condition["block"]["arguments"]["age"]["type"] == "number"


# ------------------------------------------------------------------------------------ mistakes

# (file, text in our file, what it becomes, the finding's address and path, words the finding says)
MUTATIONS = [
    pytest.param(
        "storage.tf",
        'storage_class               = "STANDARD"',
        'storage_klass               = "STANDARD"',
        "google_storage_bucket.requests.storage_klass",
        "unknown argument 'storage_klass'",
        id="unknown-argument",
    ),
    pytest.param(
        "scheduler.tf",
        "region      = var.region",
        "regoin      = var.region",
        "google_cloud_scheduler_job.upstream_tick.regoin",
        "did you mean region?",
        id="misspelt-region",
    ),
    pytest.param(
        "storage.tf",
        "      age = 1\n",
        "      agee = 1\n",
        "google_storage_bucket.requests.lifecycle_rule[1].condition.agee",
        "unknown argument 'agee'",
        id="nested-unknown-argument",
    ),
    pytest.param(
        "storage.tf",
        "  location                    = upper(var.region)\n",
        "",
        "google_storage_bucket.requests",
        "required argument 'location' is missing",
        id="required-argument-removed",
    ),
    pytest.param(
        "storage.tf",
        "uniform_bucket_level_access = true",
        'uniform_bucket_level_access = "yes"',
        "google_storage_bucket.requests.uniform_bucket_level_access",
        "the string 'yes' where a bool is wanted",
        id="literal-of-the-wrong-type",
    ),
    pytest.param(
        "storage.tf",
        "      age = 1\n",
        '      age = "one day"\n',
        "google_storage_bucket.requests.lifecycle_rule[1].condition.age",
        "where a number is wanted",
        id="nested-literal-of-the-wrong-type",
    ),
    pytest.param(
        "storage.tf",
        "        matches_prefix = lifecycle_rule.value.prefixes\n",
        "        matches_prefixes = lifecycle_rule.value.prefixes\n",
        "google_storage_bucket.artifacts.lifecycle_rule[dynamic].condition.matches_prefixes",
        "did you mean matches_prefix?",
        id="inside-a-dynamic-block",
    ),
    pytest.param(
        "storage.tf",
        'dynamic "lifecycle_rule" {',
        'dynamic "lifecycle_rules" {',
        "google_storage_bucket.artifacts.lifecycle_rules[dynamic]",
        "names no block",
        id="dynamic-names-no-block",
    ),
    pytest.param(
        "storage.tf",
        "  versioning {\n    enabled = true\n  }\n",
        "  versioning = { enabled = true }\n",
        "google_storage_bucket.requests.versioning",
        "is a block",
        id="block-written-as-argument",
    ),
    pytest.param(
        "storage.tf",
        "  versioning {\n    enabled = true\n  }\n",
        "  versioning {\n    enabled = true\n  }\n  versioning {\n    enabled = false\n  }\n",
        "google_storage_bucket.requests",
        "block 'versioning' is given 2 times",
        id="single-block-twice",
    ),
    pytest.param(
        "storage.tf",
        'resource "google_storage_bucket" "requests"',
        'resource "google_storage_buckets" "requests"',
        "google_storage_buckets.requests",
        "no resource type 'google_storage_buckets'",
        id="unknown-resource-type",
    ),
    pytest.param(
        "versions.tf",
        "default_labels = var.labels",
        "default_lables = var.labels",
        "provider.google.default_lables",
        "unknown argument",
        id="provider-block",
    ),
]


@pytest.mark.parametrize(("file", "old", "new", "where", "says"), MUTATIONS)
def test_a_mistake_planted_in_our_files_is_reported(
    schema: dict[str, Any], tmp_path: Path, file: str, old: str, new: str, where: str, says: str
) -> None:
    copy = _copy(tmp_path)
    text = (copy / file).read_text()
    assert old in text, f"the mutation's anchor is no longer in {file}: update MUTATIONS"
    (copy / file).write_text(text.replace(old, new, 1))
    findings = [str(f) for f in check_directory(copy, schema).findings]
    assert any(f.startswith(f"{file}: {where}: ") and says in f for f in findings), findings


# ------------------------------------------------------------------------------------ cty's conversions

# cty's own rules (zclconf/go-cty cty/convert/conversion_primitive.go and its public_test.go), restated.
CONVERSIONS = [
    ("1", "number", True),
    ("1.5", "number", True),
    ("hello", "number", False),
    ("true", "bool", True),
    ("1", "bool", True),
    ("0", "bool", True),
    ("hello", "bool", False),
    ("True", "bool", False),
    (4, "string", True),
    (True, "string", True),
    (True, "number", True),
    (1, "bool", False),
    (["a"], "string", False),
    ("a", "list(string)", False),
    (["a", 1, True], "list(string)", True),
    (["a"], "list(number)", False),
    ({"k": 1}, "map(string)", True),
    ({"k": ["a"]}, "map(string)", False),
    (None, "number", True),
]


@pytest.mark.parametrize(("value", "wanted", "converts"), CONVERSIONS)
def test_a_literal_is_judged_by_ctys_conversions(value: Any, wanted: str, converts: bool) -> None:
    assert (type_problem(value, wanted) is None) is converts


def test_only_a_quoted_string_without_a_template_is_a_literal() -> None:
    # python-hcl2 keeps a literal's quotes; an interpolation or a bare reference has none.
    assert literal('"STANDARD"') == "STANDARD"
    assert literal('"$${not.interpolated}"') == "$${not.interpolated}"
    assert literal('"${var.project}-bucket"') is EXPRESSION
    assert literal('"%{if true}x%{endif}"') is EXPRESSION
    assert literal("${var.region}") is EXPRESSION
    assert literal("var.region") is EXPRESSION
    assert literal(["${var.a}", '"b"']) == [EXPRESSION, "b"]


# ------------------------------------------------------------------------------------ the version


def _pin_problems(pin: google_schemas.Pin, versions_tf: Path) -> list[str]:
    source, constraint = required_provider(versions_tf, "google")
    problems = []
    if source != "hashicorp/google":
        problems.append(f"{versions_tf.name} takes google from {source}, not hashicorp/google")
    if not constraint.allows(parse_version(pin.provider_version)):
        problems.append(
            f"the schema is google {pin.provider_version}, outside {versions_tf.name}'s {constraint.text!r}: "
            f"pick a cdktn-provider-google built from a version inside it ({google_schemas.PIN.name})"
        )
    return problems


def test_the_pinned_provider_version_is_one_versions_tf_allows() -> None:
    assert _pin_problems(google_schemas.read_pin(), VERSIONS_TF) == []


def test_a_constraint_that_excludes_the_pin_is_reported(tmp_path: Path) -> None:
    copy = tmp_path / "versions.tf"
    text = VERSIONS_TF.read_text()
    assert 'version = ">= 7.0, < 8.0"' in text
    copy.write_text(text.replace('version = ">= 7.0, < 8.0"', 'version = "~> 7.47.0"', 1))
    problems = _pin_problems(google_schemas.read_pin(), copy)
    assert any("outside versions.tf's '~> 7.47.0'" in p for p in problems), problems


@pytest.mark.parametrize(
    ("constraint", "version", "allowed"),
    [
        # developer.hashicorp.com/terraform/language/expressions/version-constraints
        (">= 7.0, < 8.0", "7.46.1", True),
        (">= 7.0, < 8.0", "8.0.0", False),
        (">= 7.0, < 8.0", "6.50.0", False),
        ("~> 1.0.4", "1.0.10", True),
        ("~> 1.0.4", "1.1.0", False),
        ("~> 1.1", "1.9.0", True),
        ("~> 1.1", "2.0.0", False),
        ("1.2.0", "1.2.0", True),
        ("!= 1.2.0", "1.2.0", False),
    ],
)
def test_version_constraints_read_as_terraform_reads_them(
    constraint: str, version: str, allowed: bool
) -> None:
    assert Constraint.parse(constraint).allows(parse_version(version)) is allowed


def test_the_wheel_states_the_pinned_versions(schema: dict[str, Any]) -> None:
    pin = google_schemas.read_pin()
    # The assembly's registry links (derived) and the wheel's own METADATA both name the provider.
    from_assembly = google_schemas.WheelVersions(
        schema["derived_from"]["package_version"], schema["provider_version"]
    )
    assert google_schemas.drift(pin, from_assembly) == []
    wheel = google_schemas.CACHE / pin.wheel_name
    if wheel.is_file():
        assert google_schemas.drift(pin, google_schemas.wheel_versions(wheel)) == []


def test_a_pin_the_wheel_disagrees_with_is_reported(schema: dict[str, Any], tmp_path: Path) -> None:
    pin_copy = tmp_path / google_schemas.PIN.name
    text = google_schemas.PIN.read_text()
    pinned = google_schemas.read_pin().provider_version
    pin_copy.write_text(text.replace(f'provider_version = "{pinned}"', 'provider_version = "7.45.0"', 1))
    stated = google_schemas.WheelVersions(
        schema["derived_from"]["package_version"], schema["provider_version"]
    )
    problems = google_schemas.drift(google_schemas.read_pin(pin_copy), stated, pin_copy)
    assert len(problems) == 1 and f"update provider_version in {pin_copy.name}" in problems[0], problems
