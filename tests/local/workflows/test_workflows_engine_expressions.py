"""Expression semantics of the local Workflows engine, one documented rule per test."""

from __future__ import annotations

import json

from test_workflows_engine_support import expr, expr_error, result_of, run

from tests.harness.workflow_clock import FakeClock


def test_default_replaces_only_null() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/expression-helpers (default: "If val is null, defaultVal is returned")
    assert expr("default(null, 5)") == 5
    assert expr("default(0, 5)") == 0
    assert expr('default("", "x")') == ""
    assert expr("default(false, true)") is False


def test_map_get_returns_null_for_missing_keys_and_walks_key_lists() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/map/get
    m = {"a": {"b": 1}, "s": "text"}
    assert expr('map.get(m, "zz")', m=m) is None
    assert expr('map.get(m, ["a", "b"])', m=m) == 1
    assert expr('map.get(m, ["a", "zz"])', m=m) is None
    assert expr('map.get(m, ["s", "b"])', m=m) is None  # a non-map on the way gives null
    assert expr('default(map.get(m, "zz"), "fallback")', m=m) == "fallback"
    assert "TypeError" in expr_error("map.get(m, 1)", m=m)["tags"]


def test_missing_map_key_is_a_key_error_not_null() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/error-types (KeyError)
    error = expr_error("m.nokey", m={"a": 1})
    assert error["tags"] == ["KeyError"]
    assert expr_error('m["nokey"]', m={"a": 1})["tags"] == ["KeyError"]


def test_list_index_out_of_range_is_an_index_error() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/error-types (IndexError)
    assert expr("l[1]", l=[10, 20]) == 20
    assert expr_error("l[2]", l=[10, 20])["tags"] == ["IndexError"]


def test_division_is_float_division_and_floor_division_keeps_ints() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/expressions ("/: float division", "//: floor division")
    assert expr("5 / 2") == 2.5
    assert type(expr("4 / 2")) is float
    assert expr("5 // 2") == 2
    assert type(expr("5 // 2")) is int
    assert expr("-5 // 2") == -3
    assert expr("5 % 3") == 2


def test_int_and_double_arithmetic_keep_workflows_types() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/datatypes ("+ operator" table: INTEGER+INTEGER=INTEGER, INTEGER+DOUBLE=DOUBLE)
    assert type(expr("1 + 2")) is int
    assert type(expr("1 + 2.0")) is float
    assert type(expr("2 * 3")) is int
    assert expr("1 + 2 * 3") == 7  # * binds tighter than +
    assert expr("-2 * 3") == -6


def test_plus_concatenates_strings_and_converts_numbers_and_bools() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/datatypes ("+ operator" table: STRING with anything is STRING, BOOL+INTEGER is ERROR)
    assert expr('"run-" + "a"') == "run-a"
    assert expr('"n=" + 1') == "n=1"
    assert expr('"ok=" + true') == "ok=true"
    assert expr_error("true + 1")["tags"] == ["TypeError"]
    assert expr_error('"a" + null')["tags"] == ["TypeError"]


def test_division_by_zero_raises_zero_division_error() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/error-types (ZeroDivisionError)
    for expression in ("1 / 0", "1 // 0", "1 % 0", "1.5 / 0.0"):
        assert expr_error(expression)["tags"] == ["ZeroDivisionError"]


def test_null_true_false_literals_in_all_documented_spellings() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/datatypes (Boolean true/false, True/False, TRUE/FALSE; Null)
    assert expr("null") is None
    assert expr("null == null") is True
    assert expr("x == null", x=None) is True
    assert expr("True and TRUE and not false") is True
    assert expr("FALSE or False") is False
    assert expr("0 == false") is False  # int and bool are different types


def test_logical_operators_require_booleans_and_short_circuit() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/datatypes ("Logical operators can be used only on boolean values")
    assert expr_error("1 and true")["tags"] == ["TypeError"]
    assert expr_error('not "x"')["tags"] == ["TypeError"]
    # The right side is not evaluated when the left decides (no KeyError here).
    assert expr("false and m.missing", m={}) is False
    assert expr("true or m.missing", m={}) is True


def test_not_binds_tighter_than_in_and_comparisons() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/datatypes ("Order of operations": not above in/==)
    assert expr('not ("a" in ["a"])') is False
    # Unlike Python, `not "a" in l` is `(not "a") in l`, and `not "a"` is a TypeError.
    assert expr_error('not "a" in ["a"]')["tags"] == ["TypeError"]


def test_in_tests_list_membership_and_map_keys() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/expression-helpers ("in(): checks whether a given key is present in a list or map")
    assert expr("2 in [1, 2, 3]") is True
    assert expr("2.0 in [1, 2, 3]") is True
    assert expr('"2" in [1, 2, 3]') is False
    assert expr('"a" in m', m={"a": None}) is True
    assert expr('"b" in m', m={"a": None}) is False
    assert expr('"HttpError" in e.tags', e={"tags": ["HttpError"]}) is True


def test_string_literals_may_contain_braces_quotes_and_escapes() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/expressions (strings inside ${...})
    assert expr('"}" + "x"') == "}x"
    assert expr('"{\\"x\\": 1}"') == '{"x": 1}'
    assert expr('"it\'s"') == "it's"
    assert expr('"a\\tb"') == "a\tb"


def test_conversion_and_data_type_helpers() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/expression-helpers (string, len; the
    # pipeline calls no other helper, and the engine plays no other)
    assert expr("string(1.5)") == "1.5"
    assert expr("string(true)") == "true"
    assert expr_error("string([1])")["tags"] == ["TypeError"]
    assert expr("string(42)") == "42"


def test_string_of_a_string_is_a_type_error() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/expression-helpers: "string()
    # Accepts an attribute of type integer, double, or boolean and returns a string." A string
    # is not listed; the engine refuses it so nothing passes here that Workflows may refuse.
    error = expr_error('string("already text")')
    assert error["tags"] == ["TypeError"] and "got string" in error["message"]
    assert expr_error("string(s)", s="x")["tags"] == ["TypeError"]
    assert expr('"code " + string(404)') == "code 404"  # the documented use is still fine
    assert expr('len("abc") + len([1, 2]) + len(m)', m={"a": 1}) == 6
    assert expr_error("len(5)")["tags"] == ["TypeError"]


def test_if_helper_picks_by_condition_and_treats_null_as_false() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/expression-helpers (if: "If condition evaluates to false or null, ifFalse is returned")
    assert expr('if(1 < 2, "yes", "no")') == "yes"
    assert expr('if(null, "yes", "no")') == "no"


def test_json_encode_to_string_and_list_concat() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/json/encode_to_string and .../list/concat
    assert json.loads(expr('json.encode_to_string({"a": [1, 2.5, null]})')) == {"a": [1, 2.5, None]}
    assert expr("list.concat(l, 3)", l=[1, 2]) == [1, 2, 3]


def test_sys_get_env_reports_builtin_variables_and_defaults() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/sys/get_env
    definition = """
    - read:
        return:
          project: ${sys.get_env("GOOGLE_CLOUD_PROJECT_ID")}
          workflow: ${sys.get_env("GOOGLE_CLOUD_WORKFLOW_ID")}
          execution: ${sys.get_env("GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID")}
          custom: ${sys.get_env("BUCKET")}
          unset: ${sys.get_env("NOPE", "fallback")}
          unset_no_default: ${sys.get_env("NOPE")}
    """
    execution = run(definition, project="p1", workflow_id="wf1", env={"BUCKET": "b1"})
    assert execution.result == {
        "project": "p1",
        "workflow": "wf1",
        "execution": execution.execution_id,
        "custom": "b1",
        "unset": "fallback",
        "unset_no_default": None,
    }


def test_sys_now_reads_the_injected_clock() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/sys/now (seconds since epoch, a double)
    clock = FakeClock(start=1234.5)
    assert result_of("- t:\n    return: ${sys.now()}\n", clock=clock) == 1234.5
