"""Tool results replayed after the model's own call, when the row recorded no call ids.

ShareGPT tool data (glaive's `function_call` / `observation` turns, LLaMA-Factory's
`tool_call` parts) records calls without ids and results without `tool_call_id`. Replaying
such a result after the model called the same tool raised `KeyError: 'tool_call_id'`
(`None in [None]`): `draftset run` with `regenerate: all` on llamafactory_glaive_toolcall_en_demo
ended in a traceback.
"""

from __future__ import annotations

from draftset.generation.dialog import _replay


def test_a_result_without_a_call_id_is_keyed_to_the_models_call() -> None:
    recorded = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ],
    }
    generated = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"},
            }
        ],
    }
    results = [{"role": "tool", "content": '{"temp": 3}'}]
    assert _replay(recorded, results, generated) == [
        {"role": "tool", "content": '{"temp": 3}', "tool_call_id": "call_0", "name": "get_weather"}
    ]
