"""The size bound of a Task Document and the defaults its readers share, apart from its
parser (`steward.domain.documents`).

The HTTP boundary sizes a request body from it before anything parses the body; importing
it must not load the parser, its pydantic models and the price table with it (a cold start
of the API or the runtime routes pays for every module it imports, and most calls never
parse a document).
"""

from __future__ import annotations

MAX_DOCUMENT_BYTES = 256 * 1024  # UTF-8 bytes
DEFAULT_FOLLOW_UPS = 2  # follow-up rounds per item when the front matter names none
MAX_ATTEMPTS = 10  # attempts an item (or a follow-up round) may take at most: `max_attempts`
