"""The optional bearer-token check of both receivers, as the Collector's `bearertokenauth` extension does it."""
from __future__ import annotations

import hmac
from pathlib import Path

__all__ = ["BearerToken", "read_token_file"]


class BearerToken:
    """`allows("Bearer s3cret")` is True for the configured token; compared in constant time.

        >>> check = BearerToken("s3cret")
        >>> check.allows("Bearer s3cret"), check.allows(None)
        (True, False)
    """

    def __init__(self, token: str) -> None:
        if not token or any(ch.isspace() for ch in token):
            raise ValueError("the bearer token must be one non-empty word")
        self._expected = f"Bearer {token}".encode()

    def allows(self, authorization: str | None) -> bool:
        if not authorization:
            return False
        scheme, _, value = authorization.strip().partition(" ")
        given = f"{scheme.capitalize()} {value.strip()}".encode("utf-8", "replace")
        return hmac.compare_digest(given, self._expected)


def read_token_file(path: str) -> BearerToken:
    """The token in `path` (surrounding whitespace ignored); ValueError in one line when it cannot be used."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--bearer-token-file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return BearerToken(text)
    except ValueError as exc:
        raise ValueError(f"--bearer-token-file {path}: {exc}") from None
