"""Load-time rejection: anything outside the supported subset fails before running, naming the step."""

from __future__ import annotations

import textwrap

import pytest

from rlpipe.local.workflows import LoadError, load_workflow


def _rejects(definition: str) -> LoadError:
    with pytest.raises(LoadError) as caught:
        load_workflow(textwrap.dedent(definition))
    return caught.value


def test_parallel_step_is_rejected_with_its_name() -> None:
    error = _rejects(
        """
        main:
          steps:
            - fan_out:
                parallel:
                  branches:
                    - b1:
                        steps:
                          - s:
                              return: 1
        """
    )
    assert (error.subworkflow, error.step) == ("main", "fan_out")
    assert "parallel" in str(error)


def test_connector_call_is_rejected() -> None:
    error = _rejects(
        """
        main:
          steps:
            - publish:
                call: googleapis.pubsub.v1.projects.topics.publish
                args:
                  topic: t
        """
    )
    assert (error.subworkflow, error.step) == ("main", "publish")
    assert "googleapis" in str(error)


def test_gke_call_is_rejected() -> None:
    error = _rejects("- launch:\n    call: gke.create_job\n    args: {}\n")
    assert error.step == "launch"


def test_unknown_function_in_an_expression_is_rejected() -> None:
    error = _rejects(
        """
        main:
          steps:
            - ok:
                assign:
                  - x: 1
            - compute:
                assign:
                  - y: ${text.shout(x)}
        """
    )
    assert error.step == "compute"
    assert "text.shout" in str(error)


def test_unknown_next_target_is_rejected() -> None:
    error = _rejects(
        """
        main:
          steps:
            - a:
                next: nowhere
            - b:
                return: 1
        """
    )
    assert error.step == "a"
    assert "nowhere" in str(error)


def test_unknown_subworkflow_call_is_rejected_naming_caller_subworkflow() -> None:
    error = _rejects(
        """
        main:
          steps:
            - go:
                call: helper
        helper:
          steps:
            - deeper:
                call: missing_helper
                args:
                  x: 1
        """
    )
    assert (error.subworkflow, error.step) == ("helper", "deeper")
    assert "missing_helper" in str(error)


def test_unknown_step_key_is_rejected() -> None:
    error = _rejects("- a:\n    assign:\n      - x: 1\n    resutl: y\n")
    assert error.step == "a"
    assert "resutl" in str(error)


def test_blocking_function_inside_an_expression_is_rejected() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/overview ("HTTP calls, sys.sleep, and sys.log cannot be used inside an expression")
    error = _rejects('- a:\n    assign:\n      - r: ${http.get("http://x")}\n')
    assert error.step == "a"
    assert "http.get" in str(error)


def test_subworkflow_call_with_missing_or_unknown_params_is_rejected() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/subworkflows (params without defaults are required)
    base = """
    main:
      steps:
        - go:
            call: helper
            args: ARGS
    helper:
      params: [needed, optional: 1]
      steps:
        - r:
            return: ${needed}
    """
    assert "needed" in str(_rejects(base.replace("ARGS", "{optional: 2}")))
    assert "typo" in str(_rejects(base.replace("ARGS", "{needed: 1, typo: 2}")))
    load_workflow(textwrap.dedent(base.replace("ARGS", "{needed: 1}")))


def test_break_outside_a_loop_and_jumps_out_of_a_loop_body_are_rejected() -> None:
    assert _rejects("- a:\n    next: break\n").step == "a"
    error = _rejects(
        """
        - loop:
            for:
              value: v
              in: [1]
              steps:
                - escape:
                    next: after
        - after:
            return: 1
        """
    )
    assert error.step == "escape"


def test_invalid_expression_and_wrong_arity_are_rejected() -> None:
    assert _rejects("- a:\n    return: ${1 +}\n").step == "a"
    assert "default" in str(_rejects("- a:\n    return: ${default(1)}\n"))


def test_unsupported_http_arguments_and_bad_auth_are_rejected() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/post (auth type must be OIDC or OAuth2)
    bad_auth = "- a:\n    call: http.get\n    args:\n      url: http://x\n      auth:\n        type: Basic\n"
    assert "OIDC" in str(_rejects(bad_auth))
    private = "- a:\n    call: http.get\n    args:\n      url: http://x\n      private_service_name: s\n"
    assert "private_service_name" in str(_rejects(private))


# Shapes the published Workflows syntax schema refuses (SchemaStore's workflows.json; docs/workflow.md,
# Testing), refused at load time naming the field; test_workflow_schema.py holds the schema to
# refusing each of them too.
_HTTP_GET = "- a:\n    call: http.get\n    args:\n      url: http://x\n"
REFUSED_SHAPES = {
    "auth computed by an expression": (_HTTP_GET + "      auth: ${x}\n", "args.auth must be a map"),
    "auth type computed by an expression": (
        _HTTP_GET + "      auth:\n        type: ${x}\n",
        "args.auth.type",
    ),
    "positional call arguments": ("- a:\n    call: sys.sleep\n    args: [1]\n", "args must be a map"),
    "a default for main's parameter": (
        "main:\n  params: [{args: 1}]\n  steps:\n    - a:\n        return: 1\n",
        "main's parameter is a name",
    ),
    "expressions inside a range list": (
        "- a:\n    for:\n      value: v\n      range: ['${1}', '${2}']\n      steps:\n        - b:\n            return: 1\n",
        "range must be two numbers",
    ),
    "a range expression that is not a list": (
        "- a:\n    for:\n      value: v\n      range: ${x}\n      steps:\n        - b:\n            return: 1\n",
        "range must be a list of two bounds",
    ),
    "a for.in that is a plain string": (
        "- a:\n    for:\n      value: v\n      in: abc\n      steps:\n        - b:\n            return: 1\n",
        "for.in must be a list or an expression",
    ),
    "a raised code that is not an integer": ("- a:\n    raise:\n      code: abc\n", "raise: code"),
    "a raised message that is not a string": ("- a:\n    raise:\n      message: 5\n", "raise: message"),
    "a timeout that is not a number": (_HTTP_GET + "      timeout: soon\n", "args.timeout"),
    "an HTTP method the syntax does not name": (
        "- a:\n    call: http.request\n    args:\n      url: http://x\n      method: FETCH\n",
        "args.method",
    ),
    "empty headers": (_HTTP_GET + "      headers: {}\n", "args.headers"),
    "a query that is a plain string": (_HTTP_GET + "      query: a=b\n", "args.query"),
    "a url that is not a string": ("- a:\n    call: http.get\n    args:\n      url: 5\n", "args.url"),
    "a body that is a list": (
        "- a:\n    call: http.post\n    args:\n      url: http://x\n      body: [1]\n",
        "args.body",
    ),
}


@pytest.mark.parametrize(("definition", "named"), REFUSED_SHAPES.values(), ids=list(REFUSED_SHAPES))
def test_shapes_the_workflows_syntax_refuses_are_refused_at_load(definition: str, named: str) -> None:
    error = _rejects(definition)
    assert named in str(error)
    assert error.step in ("a", None)


def test_an_http_method_workflows_names_but_this_engine_does_not_send_is_not_supported() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/request (method: HEAD, OPTIONS, ...)
    head = "- a:\n    call: http.request\n    args:\n      url: http://x\n      method: HEAD\n"
    assert "not supported by the local engine" in str(_rejects(head))


def test_retry_predicate_must_exist_and_backoff_must_be_complete() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/retrying
    template = """
    - a:
        try:
          raise: x
        retry:
          predicate: PRED
          max_retries: 3
          backoff:
            initial_delay: 1
            max_delay: 10
            multiplier: 2
    """
    assert "nope" in str(_rejects(template.replace("PRED", "${nope}")))
    assert (
        _rejects(
            template.replace("PRED", "${http.default_retry_predicate}").replace("multiplier: 2", "")
        ).step
        == "a"
    )
    load_workflow(textwrap.dedent(template.replace("PRED", "${http.default_retry_predicate}")))


def test_yaml_1_1_booleans_do_not_rename_steps_and_duplicate_keys_are_errors() -> None:
    workflow = load_workflow("- no:\n    assign:\n      - on: yes\n- off:\n    return: ${on}\n")
    assert [step.name for step in workflow.main.body.steps] == ["no", "off"]
    assert "duplicate" in str(_rejects("- a:\n    assign:\n      - x: 1\n- a:\n    return: 1\n"))
    assert "duplicate" in str(_rejects("- a:\n    return: 1\n    return: 2\n"))


def test_main_is_required() -> None:
    assert "main" in str(_rejects("helper:\n  steps:\n    - a:\n        return: 1\n"))


def test_reserved_step_names_and_missing_required_call_arguments_are_rejected() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/jumps (end, break and continue are jump targets)
    assert "end" in str(_rejects("- end:\n    return: 1\n"))
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/request (method and url are required)
    assert "url" in str(_rejects("- a:\n    call: http.request\n    args:\n      method: GET\n"))


def test_for_directly_under_try_is_refused_as_workflows_refuses_to_deploy_it() -> None:
    # https://cloud.google.com/workflows/docs/issues ("Placement of for directly after try"):
    # "Could not deploy workflow: failed to build: error in step try: loop step name should not
    # be empty (Code: 3)"; the workaround is a named step under try: steps:.
    definition = """
        - try:
            try:
              for:
                value: v
                range: [1, 2]
                steps:
                  - log:
                      call: sys.log
                      args:
                        data: ${v}
            retry: ${http.default_retry}
        """
    error = _rejects(definition)
    assert error.step == "try"
    assert "failed to build: error in step try: loop step name should not be empty" in str(error)
    workaround = definition.replace(
        "            try:\n              for:",
        "            try:\n              steps:\n                - loopStep:\n                    for:",
    )
    workaround = workaround.replace(
        """                value: v
                range: [1, 2]
                steps:
                  - log:
                      call: sys.log
                      args:
                        data: ${v}""",
        """                      value: v
                      range: [1, 2]
                      steps:
                        - log:
                            call: sys.log
                            args:
                              data: ${v}""",
    )
    load_workflow(textwrap.dedent(workaround))


@pytest.mark.parametrize(
    ("use", "name"),
    [
        ("return: ${v}", "v"),  # the loop's value variable
        ("return: ${i}", "i"),  # its index variable
        ("return: ${made}", "made"),  # a variable first assigned in the body
        ("assign:\n          - out: ${made + 1}", "made"),
        ("call: sys.log\n        args:\n          data: ${i}", "i"),
    ],
)
def test_a_variable_created_in_a_loop_is_refused_after_it(use: str, name: str) -> None:
    # https://cloud.google.com/workflows/docs/samples/workflows-loop-scope: "any variable created
    # in a loop does not exist outside of that loop" (`# - ${outerLoopValue}  # not allowed`).
    definition = f"""
    - loop:
        for:
          value: v
          index: i
          in: [1, 2]
          steps:
            - body:
                assign:
                  - made: ${{v}}
    - after:
        {use}
    """
    error = _rejects(definition)
    assert (error.step, f"variable {name!r}") == ("after", f"variable {name!r}")
    assert "workflows-loop-scope" in str(error)


def test_loop_scope_allows_what_the_documentation_allows() -> None:
    # The same sample: a workflow-scope variable (assigned before the loop) is read and written
    # inside and read after; nested loops see their enclosing loops' variables.
    load_workflow(
        textwrap.dedent(
            """
            - init:
                assign:
                  - total: 0
                  - made: null
            - outer:
                for:
                  value: a
                  in: [1, 2]
                  steps:
                    - inner:
                        for:
                          value: b
                          in: ${[a, a]}
                          steps:
                            - add:
                                assign:
                                  - total: ${total + a + b}
                                  - made: ${b}
            - after:
                return: ${[total, made]}
            """
        )
    )


def test_a_sibling_loop_cannot_read_another_loops_variable() -> None:
    definition = """
    - first:
        for:
          value: v
          in: [1]
          steps:
            - keep:
                assign:
                  - seen: ${v}
    - second:
        for:
          value: w
          in: [1]
          steps:
            - read:
                return: ${seen}
    """
    assert _rejects(definition).step == "read"


def test_a_single_quoted_string_literal_is_refused_as_the_documentation_says() -> None:
    """https://cloud.google.com/workflows/docs/reference/syntax/expressions lists `""` as the
    string element and says string literals must be enclosed in double quotes. (Single quotes
    around a whole `'${...}'` are YAML's, and stay fine.)"""
    error = _rejects(
        """
        main:
          steps:
            - done:
                return: ${'x'}
        """
    )
    assert error.step == "done" and "must be enclosed in double quotes" in str(error)
    load_workflow('main:\n  steps:\n    - done:\n        return: \'${"a: " + "b"}\'\n')


@pytest.mark.parametrize(
    "name", ["math.min", "uuid.generate", "hash.compute_checksum", "googleapis.run.v2.x"]
)
def test_a_real_function_this_engine_lacks_is_named_as_unsupported_not_unknown(name: str) -> None:
    error = _rejects(
        f"""
        main:
          steps:
            - pick:
                return: ${{{name}(1, 2)}}
        """
    )
    assert f"{name} is a Workflows standard-library function that this engine does not support" in str(error)


def test_a_name_no_one_defines_is_unknown() -> None:
    error = _rejects(
        """
        main:
          steps:
            - pick:
                return: ${math.minimum(1, 2)}
        """
    )
    assert "unknown function 'math.minimum'" in str(error)


@pytest.mark.parametrize(
    ("definition", "words"),
    [
        (  # assigned before the loop
            """
            main:
              steps:
                - init:
                    assign:
                      - item: 0
                - loop:
                    for:
                      value: item
                      in: [1, 2]
                      steps:
                        - noop:
                            assign:
                              - x: ${item}
                - done:
                    return: ${item}
            """,
            "a variable outside every loop",
        ),
        (  # assigned after it
            """
            main:
              steps:
                - loop:
                    for:
                      value: i
                      index: n
                      in: [1, 2]
                      steps:
                        - noop:
                            return: ${i}
                - later:
                    assign:
                      - n: 3
                - done:
                    return: ${n}
            """,
            "a variable outside every loop",
        ),
        (  # a parameter's name
            """
            main:
              params: [item]
              steps:
                - loop:
                    for:
                      value: item
                      in: [1, 2]
                      steps:
                        - noop:
                            return: ${item}
            """,
            "a variable outside every loop",
        ),
        (  # nested loops, one name
            """
            main:
              steps:
                - outer:
                    for:
                      value: v
                      in: [1, 2]
                      steps:
                        - inner:
                            for:
                              value: v
                              in: [3, 4]
                              steps:
                                - noop:
                                    return: ${v}
            """,
            "the loop 'outer' around it",
        ),
    ],
    ids=["before", "after", "parameter", "nested"],
)
def test_a_loop_variable_named_like_a_variable_outside_it_is_refused(definition: str, words: str) -> None:
    """https://cloud.google.com/workflows/docs/reference/syntax/iteration: the loop variable "must
    not be used in assignments or expressions outside of the loop", and a name may serve several
    loops "as long as they are not nested"."""
    error = _rejects(definition)
    assert words in str(error) and "syntax/iteration" in str(error)


def test_one_loop_variable_name_in_two_loops_side_by_side_is_fine() -> None:
    load_workflow(
        textwrap.dedent(
            """
            main:
              steps:
                - first:
                    for:
                      value: v
                      in: [1]
                      steps:
                        - a:
                            assign:
                              - x: ${v}
                - second:
                    for:
                      value: v
                      in: [2]
                      steps:
                        - b:
                            assign:
                              - y: ${v}
                - done:
                    return: 1
            """
        )
    )
