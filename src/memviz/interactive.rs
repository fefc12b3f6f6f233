//! The interactive page: the static page's views with an inline script (`interactive.js`) and
//! style, and the JSON blob of `page_data` that the script reads. Still one file, nothing
//! fetched: no `src`, no `href`, no network access from the script.

use super::html::STYLE;
use super::svg::escape;

/// The script (plain JavaScript, no libraries).
const SCRIPT: &str = include_str!("interactive.js");

/// The tooltip's and the zoom bar's style.
const INTERACTIVE_STYLE: &str =
    "#memviz-tip{position:absolute;display:none;z-index:10;max-width:760px;padding:6px 9px;\
background:#fffff4;border:1px solid #888;border-radius:3px;box-shadow:2px 2px 6px rgba(0,0,0,.25);\
font:12px/1.35 'DejaVu Sans Mono',Menlo,Consolas,monospace;white-space:pre;pointer-events:none;color:#222}\
#memviz-tip .head{font-weight:bold}\
#memviz-zoom{font-size:12px;color:#555;margin:0 0 4px 90px}#memviz-zoom button{margin-right:4px;min-width:28px}\
#memviz-zoom span{margin-left:8px}#timeline svg{cursor:grab;user-select:none}\
.tl-zoom polyline{vector-effect:non-scaling-stroke}";

/// The page titled `title` around `body` (the views), with `data` (page_data's JSON) and the script.
pub(crate) fn page(title: &str, body: &str, data: &str) -> String {
    let t = escape(title);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}{INTERACTIVE_STYLE}</style></head><body>\n<h1>{t}</h1>\n{body}\
<script type=\"application/json\" id=\"memviz-data\">{data}</script>\n<script>\n{SCRIPT}</script>\n</body></html>\n"
    )
}
