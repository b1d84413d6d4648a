"""Requests a page may send twice: an answer or a submission given offline is kept in the browser
and sent again when the network returns, with the key it was first sent with (`Idempotency-Key`,
made by the page). The row made by the first request that arrived carries the key; a request
with a key already used by the same learner makes nothing new and answers with that row."""

import re
from collections.abc import Mapping

HEADER = "Idempotency-Key"
_KEY = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def key_of(headers: Mapping[str, str]) -> str | None:
    """The key among a request's headers, or None when it has none or it is malformed (then
    nothing is deduped: the request is an ordinary one)."""
    key = headers.get(HEADER, "")
    return key if _KEY.match(key) else None


def code_hash(code: str) -> str:
    """FNV-1a (32 bits) over the UTF-16 code units of ``code``, as offline.js's draftHash computes
    it: which copy of a draft an edit started from (not a security measure)."""
    h = 0x811C9DC5
    data = code.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h ^= data[i] | (data[i + 1] << 8)
        h = (h * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"
