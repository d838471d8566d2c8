"""A generator of nginx error-log lines (``yyyy/MM/dd HH:MM:SS [level] pid#tid: *cid message``), a format none
of the LogHub presets knows, with the template each line was made from."""

from __future__ import annotations

import random

#: (level, template) pairs; ``{}`` fields are filled with random parameters.
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("error", 'open() "/usr/share/nginx/html/{}.png" failed (2: No such file or directory), client: {}, '
              'server: localhost, request: "GET /{}.png HTTP/1.1"'),
    ("warn", "an upstream response is buffered to a temporary file /var/cache/nginx/proxy_temp/{}/{} while "
             "reading upstream, client: {}"),
    ("notice", "signal process started"),
    ("error", "upstream timed out (110: Connection timed out) while reading response header from upstream, "
              "client: {}, upstream: \"http://{}:8080/api/{}\""),
    ("info", "client {} closed keepalive connection"),
    ("error", "limiting requests, excess: {} by zone \"perip\", client: {}"),
)


def nginx_lines(n: int, seed: int = 7) -> tuple[list[str], list[int]]:
    """``n`` lines and, per line, the index in :data:`TEMPLATES` it was made from (deterministic for ``seed``)."""
    rnd = random.Random(seed)
    lines: list[str] = []
    labels: list[int] = []
    for i in range(n):
        k = rnd.randrange(len(TEMPLATES))
        level, template = TEMPLATES[k]

        def param() -> str:
            return rnd.choice((f"{rnd.randrange(1, 255)}.{rnd.randrange(255)}.{rnd.randrange(255)}."
                               f"{rnd.randrange(255)}", f"{rnd.randrange(10**6)}", f"img{rnd.randrange(999)}",
                               f"{rnd.randrange(100)}.{rnd.randrange(1000):03d}"))

        msg = template.format(*(param() for _ in range(template.count("{}"))))
        ts = f"2024/03/{5 + i // 5000:02d} {10 + (i // 600) % 12:02d}:{(i // 10) % 60:02d}:{i % 60:02d}"
        lines.append(f"{ts} [{level}] {rnd.randrange(100, 999)}#0: *{rnd.randrange(1, 99999)} {msg}")
        labels.append(k)
    return lines, labels
