"""Keep secrets out of messages, logs and bookkeeping rows."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote

MASK = "***"

#: The name of a connection property whose value is a password (`password`,
#: `sslpassword`, `trustStorePassword`, `pwd`, `passwd`, a key store's `...Passphrase`).
SECRET_KEY = re.compile(r"(?i)pass|pwd")

#: A password parameter: in a URL's query (after `?` or `&`) it runs to the next `&`, as
#: pgjdbc and MariaDB Connector/J split the query at `&` only (a `;` is the password's);
#: elsewhere (`;password=x;db=d`, SQL Server's) to the next `&` or `;`.
_URL_PASSWORD_PARAM = re.compile(
    r"(?i)(?:(?<=[?&])(password|pwd|passwd)=([^&\s]*)|(password|pwd|passwd)=([^&;\s]*))"
)
#: `//user:password@`: the password runs to the last `@` before the query or a space, so a
#: password with `/` or `@` in it is hidden whole (over-masking a path is harmless).
_URL_USERINFO = re.compile(r"(//[^/:@\s]*):([^\s?;]*)@")
#: `user:password@host` anywhere in a text, as a driver quotes the host part it failed on
#: (`caused by: app:PW@127.0.0.1`): a token that starts a word, without `/` in it (a URL's
#: own user info is `_URL_USERINFO`'s), the password up to its last `@`.
_TEXT_USERINFO = re.compile(r"(?<![^\s'\"(=,;])([^\s/:@'\"()=,;?]+):([^\s/?;'\"]*)@")
#: One host of a PostgreSQL, MariaDB or MySQL URL: a name, an IPv4 address or a bracketed
#: IPv6 one, and its port.
_HOST = r"(?:\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9._%-]+)(?::\d*)?"
#: Such a URL whose authority starts with a login, `//user@` or `//user:password@` (other
#: drivers' URLs have syntaxes of their own): the login runs to the last `@` that its
#: hosts and their `/` follow, whatever it holds (`?`, `;`, `@` in a password or an
#: `app@server` user).
_URL_LOGIN = re.compile(
    rf"(jdbc:(?:postgresql|mariadb|mysql)[^/\s]*//)(\S*)@({_HOST}(?:,{_HOST})*/)"
)
_WORD = re.compile(r"\w")


def mask_url(url: str) -> str:
    """Hide passwords in `password=` parameters and `user:password@` user info, in a URL
    or anywhere in a text."""
    masked = _URL_PASSWORD_PARAM.sub(lambda m: f"{m.group(1) or m.group(3)}={MASK}", url)
    masked = _URL_LOGIN.sub(_masked_login, masked)
    masked = _URL_USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", masked)
    return _TEXT_USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", masked)


def _masked_login(found: re.Match[str]) -> str:
    """A URL's login with its password, if any, masked (`app:***@host/`)."""
    scheme, login, hosts = found.groups()
    user = login.split(":", 1)[0] + f":{MASK}" if ":" in login else login
    return f"{scheme}{user}@{hosts}"


def has_login(url: str) -> bool:
    """Whether a PostgreSQL, MariaDB or MySQL URL names a login before its host (`user@`
    or `user:password@`)."""
    return _URL_LOGIN.match(url) is not None


def url_secrets(url: str) -> list[str]:
    """The passwords a URL carries (user info, `password=` parameters), as written and
    decoded."""
    found = [m.group(2).split(":", 1)[1] for m in _URL_LOGIN.finditer(url) if ":" in m.group(2)]
    found += [m.group(2) for m in _URL_USERINFO.finditer(url)]
    found += [m.group(2) or m.group(4) for m in _URL_PASSWORD_PARAM.finditer(url)]
    return [form for secret in found for form in {secret, unquote(secret)}]


def _token(form: str) -> str:
    """A pattern for `form` standing as a whole token, never inside a longer word: a
    password `x` masks `password=x` and `app:x@h`, but leaves `xasink_jobs` alone."""
    head = r"(?<!\w)" if _WORD.match(form[0]) else ""
    tail = r"(?!\w)" if _WORD.match(form[-1]) else ""
    return head + re.escape(form) + tail


class Redactor:
    """Replaces known secrets, in plain and URL-encoded forms, and masks URLs."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms.update({secret, quote(secret, safe=""), quote_plus(secret)})
        # Longest first, so a secret that contains another is replaced whole.
        ordered = sorted(forms, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(_token, ordered))) if ordered else None

    def __call__(self, text: object) -> str:
        result = str(text)
        if self._secrets is not None:
            result = self._secrets.sub(MASK, result)
        return mask_url(result)
