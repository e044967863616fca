"""Step semantics of the local Workflows engine: assign, switch, for, jumps, subworkflows, raise."""

from __future__ import annotations

import pytest
from test_workflows_engine_support import error_of, result_of, run

from rlpipe.local.workflows import LoadError, State
from tests.harness.workflow_clock import FakeClock


def test_only_a_whole_dollar_brace_value_is_an_expression() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/expressions ("All expressions must begin with a $ and be enclosed in curly brackets")
    definition = """
    main:
      params: [args]
      steps:
        - done:
            return:
              - ${args.name}
              - objects/${args.name}
              - ${args.name} and more
    """
    assert result_of(definition, {"name": "bob"}) == ["bob", "objects/${args.name}", "${args.name} and more"]


def test_plain_list_of_steps_is_main() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/subworkflows (a workflow without subworkflows is a list of steps)
    assert result_of("- a:\n    assign:\n      - x: 2\n- b:\n    return: ${x * 21}\n") == 42


def test_assign_nested_targets_and_copies_values() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/variables (assign, maps and lists)
    definition = """
    - init:
        assign:
          - m: {"a": {"b": 1}}
          - key: "k"
          - m.a.b: 2
          - m["x"]: 3
          - m[key]: 4
          - m.new.deep: 5
          - l: [1, 2, 3]
          - l[1]: 20
          - copy: ${m}
          - copy.a.b: 99
    - done:
        return: [ '${m}', '${l}', '${copy.a.b}' ]
    """
    m, items, copied = result_of(definition)
    assert m == {"a": {"b": 2}, "x": 3, "k": 4, "new": {"deep": 5}}  # m unchanged by the edit of copy
    assert items == [1, 20, 3]
    assert copied == 99


def test_assign_to_a_list_index_past_the_end_is_an_index_error() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/error-types (IndexError)
    assert error_of("- a:\n    assign:\n      - l: [1]\n      - l[1]: 2\n")["tags"] == ["IndexError"]


def test_switch_runs_first_true_condition_then_falls_through() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/conditions
    definition = """
    main:
      params: [args]
      steps:
        - init:
            assign:
              - seen: []
        - pick:
            switch:
              - condition: ${args.x < 10}
                assign:
                  - seen: ${list.concat(seen, "small")}
              - condition: ${args.x < 100}
                steps:
                  - medium:
                      assign:
                        - seen: ${list.concat(seen, "medium")}
              - condition: ${args.x < 1000}
                next: large
        - after_switch:
            assign:
              - seen: ${list.concat(seen, "after")}
            next: done
        - large:
            assign:
              - seen: ${list.concat(seen, "large")}
        - done:
            return: ${seen}
    """
    assert result_of(definition, {"x": 5}) == ["small", "after"]  # only the first true condition
    assert result_of(definition, {"x": 50}) == ["medium", "after"]
    assert result_of(definition, {"x": 500}) == ["large"]
    assert result_of(definition, {"x": 5000}) == ["after"]  # no match: continue with the next step


def test_switch_level_next_applies_when_no_condition_jumps() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/conditions (switch with a step-level next)
    definition = """
    main:
      params: [args]
      steps:
        - pick:
            switch:
              - condition: ${args.go}
                next: yes_step
            next: fallback
        - yes_step:
            return: "yes"
        - fallback:
            return: "fallback"
    """
    assert result_of(definition, {"go": True}) == "yes"
    assert result_of(definition, {"go": False}) == "fallback"


def test_switch_condition_must_be_boolean() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/conditions ("Each expression must evaluate to true or false")
    definition = "- pick:\n    switch:\n      - condition: ${1}\n        return: 1\n"
    assert error_of(definition)["tags"] == ["TypeError"]


def test_for_range_includes_both_ends_and_index_counts_from_zero() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/iteration (range-based and list iteration)
    definition = """
    - init:
        assign:
          - values: []
          - pairs: []
    - by_range:
        for:
          value: v
          range: [1, 3]
          steps:
            - add:
                assign:
                  - values: ${list.concat(values, v)}
    - by_list:
        for:
          value: item
          index: i
          in: ["a", "b"]
          steps:
            - pair:
                assign:
                  - pairs: ${list.concat(pairs, string(i) + item)}
    - done:
        return: [ '${values}', '${pairs}' ]
    """
    assert result_of(definition) == [[1, 2, 3], ["0a", "1b"]]


def test_for_range_bounds_may_be_one_expression_of_a_list() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/iteration (range: ${[BEGIN_EXPRESSION, END_EXPRESSION]})
    definition = """
    main:
      params: [args]
      steps:
        - init:
            assign:
              - values: []
        - by_range:
            for:
              value: v
              range: ${[args.first, args.first + args.count - 1]}
              steps:
                - add:
                    assign:
                      - values: ${list.concat(values, v)}
        - done:
            return: ${values}
    """
    assert result_of(definition, {"first": 4, "count": 3}) == [4, 5, 6]


def test_break_and_continue() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/iteration (next: break / next: continue)
    definition = """
    - init:
        assign:
          - kept: []
    - loop:
        for:
          value: v
          range: [1, 10]
          steps:
            - check:
                switch:
                  - condition: ${v % 2 == 0}
                    next: continue
                  - condition: ${v > 6}
                    next: break
            - keep:
                assign:
                  - kept: ${list.concat(kept, v)}
    - done:
        return: ${kept}
    """
    assert result_of(definition) == [1, 3, 5]


def test_variables_created_in_a_loop_do_not_exist_after_it() -> None:
    # https://cloud.google.com/workflows/docs/samples/workflows-loop-scope: a variable assigned
    # before the loop keeps the loop's writes; one created inside is gone after it (reading it
    # is refused when the definition loads, tests/local/workflows/test_workflows_engine_load.py).
    definition = """
    - init:
        assign:
          - outer: 0
    - loop:
        for:
          value: v
          in: [1, 2]
          steps:
            - inner:
                assign:
                  - outer: ${outer + v}
                  - created_inside: ${v}
    - read_outer:
        return: ${outer}
    """
    assert result_of(definition) == 3
    with pytest.raises(LoadError, match="created_inside"):
        run(definition.replace("return: ${outer}", "return: ${created_inside}"))


def test_variables_created_in_except_are_local_to_it() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/catching-errors ("Variable scope")
    definition = """
    - init:
        assign:
          - shared: null
    - guarded:
        try:
          raise: "boom"
        except:
          as: e
          steps:
            - handle:
                assign:
                  - shared: ${e}
                  - local_only: 1
    - done:
        return: ${shared}
    """
    assert result_of(definition) == "boom"
    assert error_of(definition.replace("return: ${shared}", "return: ${local_only}"))["tags"] == ["KeyError"]


def test_subworkflow_params_with_defaults_and_nested_calls() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/subworkflows (params with default values)
    definition = """
    main:
      steps:
        - first:
            call: describe
            args:
              run_id: r1
              stage: convert
            result: a
        - second:
            call: describe
            args:
              run_id: r2
              stage: train
              poll: 5
            result: b
        - done:
            return: [ '${a}', '${b}' ]
    describe:
      params: [run_id, stage, poll: 300]
      steps:
        - inner:
            call: join
            args:
              left: ${run_id + "/" + stage}
              right: ${poll}
            result: joined
        - back:
            return: ${joined}
    join:
      params: [left, right, sep: ":"]
      steps:
        - r:
            return: ${left + sep + string(right)}
    """
    assert result_of(definition) == ["r1/convert:300", "r2/train:5"]


def test_raise_a_map_and_a_string() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/raising-errors
    definition = """
    - init:
        assign:
          - caught: []
    - map_error:
        try:
          raise:
            code: 55
            message: "Something went wrong."
            tags: ["MyError"]
        except:
          as: e
          steps:
            - keep_map:
                assign:
                  - caught: ${list.concat(caught, [e.code, e.message, "MyError" in e.tags])}
    - string_error:
        try:
          raise: "plain text"
        except:
          as: e
          steps:
            - keep_string:
                assign:
                  - caught: ${list.concat(caught, e)}
    - done:
        return: ${caught}
    """
    assert result_of(definition) == [[55, "Something went wrong.", True], "plain text"]


def test_uncaught_raise_fails_the_execution_with_its_payload_and_location() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/error-types ("the execution fails, and an error map ... is returned")
    definition = """
    main:
      steps:
        - go:
            call: helper
    helper:
      steps:
        - explode:
            raise:
              code: 7
              message: nope
    """
    execution = run(definition)
    assert execution.state is State.FAILED
    assert execution.error.payload == {"code": 7, "message": "nope"}
    assert execution.error.frames == (("helper", "explode"), ("main", "go"))
    assert 'in step "explode", routine "helper"' in execution.error.context


def test_next_end_stops_with_null_and_next_skips_steps() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/jumps (next: end)
    definition = """
    - a:
        assign:
          - x: 1
        next: c
    - b:
        return: "skipped"
    - c:
        next: end
    - d:
        return: "not reached"
    """
    execution = run(definition)
    assert execution.state is State.SUCCEEDED
    assert execution.result is None
    assert execution.step_names() == ["a", "c"]


def test_return_from_a_subworkflow_inside_a_loop_returns_to_the_caller() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/completing (return)
    definition = """
    main:
      steps:
        - call_it:
            call: first_even
            args:
              items: [1, 3, 4, 6]
            result: found
        - done:
            return: ${found}
    first_even:
      params: [items]
      steps:
        - scan:
            for:
              value: v
              in: ${items}
              steps:
                - test:
                    switch:
                      - condition: ${v % 2 == 0}
                        return: ${v}
        - none:
            return: null
    """
    assert result_of(definition) == 4


def test_sys_sleep_uses_the_fake_clock_and_sys_log_is_recorded() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/sys/sleep and .../sys/log
    clock = FakeClock(start=100.0)
    definition = """
    - nap:
        call: sys.sleep
        args:
          seconds: 90
    - note:
        call: sys.log
        args:
          text: ${"woke at " + string(sys.now())}
          severity: INFO
    """
    execution = run(definition, clock=clock)
    assert execution.state is State.SUCCEEDED
    assert clock.sleeps == [90.0]
    assert [(log.severity, log.payload) for log in execution.logs] == [("INFO", "woke at 190.0")]
