"""Loaded by Schemathesis (SCHEMATHESIS_HOOKS). How it signs its API calls: tokens were made for it
by the test, so fuzzing sign-ins (which throttles this client address) cannot lock it out. And lone
surrogates among its inputs, which its generators never make (they make encodable text): each
negative case with a JSON object body gets one in a string field; such a case must still be
answered with a 4xx. What it sent is counted into TREINO_TEST_STATS, for the test to check."""

import atexit
import json
import os
from collections import Counter

import schemathesis

_TOKENS = json.loads(os.environ["TREINO_TEST_TOKENS"])
_MAIN, _SPARE = _TOKENS[0], _TOKENS[1:]
_SENT: Counter[str] = Counter()
MAX_ID = 2**31 - 1


@schemathesis.auth(refresh_interval=None)
class Bearer:
    """One token for every call, except that each `DELETE /api/tokens` revokes a spare one of its
    own (when they run out, a revoked one: then 401, as documented)."""

    def get(self, case, context):
        if case.method.upper() == "DELETE" and case.path == "/api/tokens":
            return _SPARE.pop() if len(_SPARE) > 1 else _SPARE[0]
        return _MAIN

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schemathesis.hook
def map_case(context, case):
    negative = case.meta is not None and case.meta.generation.mode == "negative"
    if negative and isinstance(case.body, dict):
        for key, value in case.body.items():
            if isinstance(value, str):
                # sent as the JSON text itself: no JSON Schema validator takes a lone surrogate
                case.body = json.dumps({**case.body, key: value + "\ud800"}).encode()
                _SENT["lone_surrogate"] += 1
                break
    _count(case)
    return case


def _count(case) -> None:
    body = case.body
    texts = [body.decode(errors="replace") if isinstance(body, bytes) else json.dumps(body, default=str)]
    for part in (case.path_parameters, case.query):
        texts += [str(v) for v in (part or {}).values()]
    if any("\x00" in t or "\\u0000" in t for t in texts):  # raw, or escaped in JSON
        _SENT["nul"] += 1
    submission_id = (case.path_parameters or {}).get("submission_id")
    if isinstance(submission_id, int) and submission_id > MAX_ID:
        _SENT["huge_id"] += 1


@atexit.register
def _write() -> None:
    with open(os.environ["TREINO_TEST_STATS"], "w") as f:
        json.dump(_SENT, f)
