"""The fast argument check agrees with jsonschema's Draft 2020-12 validator on its whole subset."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from otel_agent_eval.core.schema_check import compile_check

NAMES = st.sampled_from(["query", "max_results", "horizon", "a"])
TYPES = st.sampled_from(["string", "integer", "number", "boolean", "array", "object", "null"])
prop = st.fixed_dictionaries({}, optional={
    "type": TYPES, "minLength": st.integers(0, 3), "maxLength": st.integers(0, 5),
    "minimum": st.one_of(st.integers(-3, 3), st.floats(-3, 3)), "maximum": st.one_of(st.integers(-3, 3), st.floats(-3, 3)),
    "description": st.text(max_size=5)})
schema = st.fixed_dictionaries({"type": st.just("object")}, optional={
    "properties": st.dictionaries(NAMES, prop, max_size=3),
    "required": st.lists(NAMES, unique=True, max_size=3),
    "additionalProperties": st.booleans()})
value = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([0.0, 1.0, -2.0, 2.5]) | st.floats(-5, 5, allow_nan=False) | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=4)
arguments = st.dictionaries(NAMES, value, max_size=4)


@settings(max_examples=600, deadline=None)
@given(schema=schema, arguments=arguments)
def test_fast_check_answers_exactly_as_jsonschema(schema, arguments):
    check = compile_check(schema)
    assert check is not None  # the whole strategy lies inside the subset
    assert check(arguments) == Draft202012Validator(schema).is_valid(arguments)


def test_schemas_outside_the_subset_go_to_jsonschema():
    assert compile_check({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}) is None
    assert compile_check({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}) is None
    assert compile_check({"type": "array"}) is None
    assert compile_check({"type": "object", "oneOf": []}) is None


def test_edge_cases_where_python_and_json_schema_types_differ():
    cases = [({"type": "integer"}, 1.0), ({"type": "integer"}, True), ({"type": "number"}, False), ({"type": "integer"}, 2.5),
             ({"minimum": 1}, True), ({"minimum": 1}, 0.5), ({"maxLength": 2}, "abc"), ({"minLength": 1}, ""),
             ({"type": "object"}, {}), ({"type": "array"}, [])]
    for prop, value in cases:
        schema = {"type": "object", "properties": {"a": prop}}
        assert compile_check(schema)({"a": value}) == Draft202012Validator(schema).is_valid({"a": value}), (prop, value)
