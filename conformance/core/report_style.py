"""The look the harness's HTML reports share (the conformance report and the validator's): one stylesheet,
so a reader of both finds the same table, cell colours, evidence boxes and small print."""

from __future__ import annotations

__all__ = ["STYLE"]

#: cell classes: ok (green: conforms, passed), div (red: diverges, failed), exp (amber: known divergence,
#: noted), na (grey: not applicable, skipped), err (error), bad (outlined: unexpected)
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table.matrix{border-collapse:collapse} .matrix th,.matrix td{border:1px solid #ccd;padding:3px 8px}
.matrix th{background:#eef} td.ok{background:#dfd} td.div{background:#fdd} td.exp{background:#fec}
td.na{background:#eee} td.err{background:#f99} td.bad{outline:2px solid #c00}
.matrix td a{color:inherit}
.ev{border:1px solid #ccd;margin:12px 0;padding:8px 12px} pre{background:#f6f6fa;padding:6px;overflow:auto}
.ev svg{display:block;max-width:100%;height:auto}
.small{color:#556;font-size:12px}
"""
