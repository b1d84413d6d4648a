"""What /openapi.json promises, read as a client generator would: one error shape, every status an
operation can answer, typed verdicts, and only the machine-facing operations."""

import pytest

ERROR = {"$ref": "#/components/schemas/ErrorOut"}


@pytest.fixture
def document(client) -> dict:
    return client.get("/openapi.json").json()


def _operations(document):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            yield path, method, operation


def test_only_the_api_and_operations_endpoints_are_documented(document):
    paths = set(document["paths"])
    assert {p for p in paths if not p.startswith("/api/")} == {"/healthz", "/readyz", "/metrics"}
    assert {
        "/api/accounts",
        "/api/tokens",
        "/api/account",
        "/api/lessons",
        "/api/progress",
        "/api/lessons/{slug}/exercises/{exercise_slug}/submissions",
        "/api/submissions/{submission_id}",
    } <= paths
    for _path, _method, operation in _operations(document):
        for response in operation["responses"].values():
            assert "text/html" not in response.get("content", {})
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_every_error_an_operation_can_answer_is_documented_as_error_out(document):
    for path, method, operation in _operations(document):
        responses = operation["responses"]
        expected = {"413"} | ({"401"} if path.startswith("/api/") else set())
        if method != "get" and path.startswith("/api/"):
            expected |= {"403"}
        if "requestBody" in operation:
            expected |= {"400", "422"}
        if "{" in path:
            expected |= {"404", "422"}
        assert expected <= set(responses), (method, path, sorted(responses))
        for status, response in responses.items():
            if status.startswith(("4", "5")) and path != "/readyz":
                assert response["content"] == {"application/json": {"schema": ERROR}}, (method, path, status)
    assert set(document["paths"]["/readyz"]["get"]["responses"]) >= {"200", "503"}


def test_the_verdict_and_the_error_are_typed(document):
    schemas = document["components"]["schemas"]
    assert schemas["ErrorOut"]["required"] == ["code", "message"]
    verdict = schemas["Verdict"]
    assert set(verdict["required"]) >= {
        "version",
        "exercise",
        "status",
        "diagnosis",
        "checks",
        "metrics",
        "output",
    }
    assert verdict["properties"]["status"]["enum"] == ["passed", "failed", "error", "timeout", "rejected"]
    submission = schemas["SubmissionOut"]["properties"]["verdict"]
    assert {"$ref": "#/components/schemas/Verdict"} in submission["anyOf"]
    assert schemas["SubmissionOut"]["properties"]["status"] == {"$ref": "#/components/schemas/Status"}
    ids = document["paths"]["/api/submissions/{submission_id}"]["get"]["parameters"][0]["schema"]
    assert (ids["minimum"], ids["maximum"]) == (1, 2**31 - 1)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer revoked-or-made-up"}])
@pytest.mark.parametrize("path", ["/api/account", "/api/tokens", "/api/lessons", "/readyz"])
def test_trace_and_other_unrouted_methods_are_405_with_the_paths_methods(client, path, headers):
    for method in ("TRACE", "PATCH"):
        response = client.request(method, path, headers=headers)
        assert response.status_code == 405, (method, path, response.text)
        assert response.json()["code"] == "method_not_allowed"
    allowed = {"/api/tokens": "DELETE, POST", "/api/account": "GET", "/api/lessons": "GET", "/readyz": "GET"}
    assert response.headers["Allow"] == allowed[path]
