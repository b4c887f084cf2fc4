"""The refusals every endpoint can answer, written into the OpenAPI schema so that a client (and
a fuzzer that checks each answer against the schema) knows them: bad input, missing or wrong
credentials, a missing role, a row out of reach, a body over the limits, too many bad tokens."""

from __future__ import annotations

from typing import Any

ERROR = {
    "type": "object",
    "description": "Why the request was refused: `detail`, or the problems by field.",
    "additionalProperties": True,
}
REFUSALS = {
    "400": "the input is invalid, or its JSON nests deeper than MAX_JSON_DEPTH",
    "401": "no credentials, or credentials that are not valid",
    "403": "the role this needs is missing",
    "404": "no such row, or one on a cluster you cannot see",
    "413": "the body is larger than MAX_UPLOAD_BYTES",
    "429": "too many wrong tokens from this address: wait and try again",
}


def document_refusals(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation lists the refusals it lacks."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path in result.get("paths", {}).values():
        for operation in path.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for code, description in REFUSALS.items():
                operation["responses"].setdefault(
                    code, {"description": description, "content": content}
                )
    return result
