"""Keep secrets out of messages, logs and bookkeeping rows."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"

_URL_PASSWORD_PARAM = re.compile(r"(?i)(password|pwd|passwd)=([^&;\s]*)")
#: `//user:password@`: the password runs to the last `@` before the query or a space, so a
#: password with `/` or `@` in it is hidden whole (over-masking a path is harmless).
_URL_USERINFO = re.compile(r"(//[^/:@\s]+):([^\s?;]*)@")


def mask_url(url: str) -> str:
    """Hide passwords in `password=` parameters and `user:password@` user info."""
    masked = _URL_PASSWORD_PARAM.sub(lambda m: f"{m.group(1)}={MASK}", url)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", masked)


class Redactor:
    """Replaces known secrets, in plain and URL-encoded forms, and masks URLs."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms.update({secret, quote(secret, safe=""), quote_plus(secret)})
        # Longest first, so a secret that contains another is replaced whole.
        self._forms = sorted(forms, key=len, reverse=True)

    def __call__(self, text: object) -> str:
        result = str(text)
        for form in self._forms:
            result = result.replace(form, MASK)
        return mask_url(result)
