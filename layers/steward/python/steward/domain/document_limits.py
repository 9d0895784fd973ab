"""The size bound of a Task Document, apart from its parser (`steward.domain.documents`).

The HTTP boundary sizes a request body from it before anything parses the body; importing
it must not load the parser, its pydantic models and the price table with it (a cold start
of the API or the runtime routes pays for every module it imports, and most calls never
parse a document).
"""

from __future__ import annotations

MAX_DOCUMENT_BYTES = 256 * 1024  # UTF-8 bytes
