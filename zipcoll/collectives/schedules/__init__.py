"""One module a schedule: each registers itself in `zipcoll.collectives.SCHEDULES` on import.

A flat schedule is a generator function `(t, buf, enc, tag, xp, send=None) -> Steps`
that all-reduces `buf` in place over transport `t` (reading `send` instead of `buf` for
its own contribution when given), moving chunks with the steps of
`zipcoll.collectives.steps` under the encoding `enc` (lossless or compressed).
"""
