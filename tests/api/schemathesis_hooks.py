"""Loaded by Schemathesis (SCHEMATHESIS_HOOKS): how it signs its API calls. Tokens were made
for it by the test, so fuzzing sign-ins (which throttles this client address) cannot lock it out."""

import json
import os

import schemathesis

_TOKENS = json.loads(os.environ["TREINO_TEST_TOKENS"])
_MAIN, _SPARE = _TOKENS[0], _TOKENS[1:]


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
