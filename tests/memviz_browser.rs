//! `cudasem memviz`'s interactive page in a real browser: headless Chromium (Debian's `chromium`
//! package; `CUDASEM_CHROMIUM` names another binary) loads the page the command writes for a
//! snapshot whose entries and blocks carry stack frames, and
//!
//! - the page's script runs to its end with no exception and no `console.error`;
//! - a mouse move over the band of a known allocation shows a tooltip with that allocation's size,
//!   stream and the frames of its stack (`name  file:line`, first frames first), and over a block
//!   of the segment view the same frames;
//! - the zoom buttons and a drag change the timeline's visible events;
//! - a screenshot (1280×900, device scale factor 1, the text made transparent and lines of one
//!   height, so that fonts change neither pixels nor layout; the text is checked through the DOM)
//!   matches `tests/data/memviz_browser.png` within a per-pixel tolerance, also with the text in
//!   other fonts, and pages drawn differently (coloured by stream, or without the script) do not.
//!
//! This is a host-side test: it does not depend on the driver, so it runs (and needs Chromium and
//! the DejaVu fonts) wherever the suite runs; a machine without Chromium fails it with a message
//! saying how to install it (`.ci/run` does). `CUDASEM_UPDATE_REFERENCE=1` rewrites the reference.

mod common;

use resvg::tiny_skia::Pixmap;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const BASE: u64 = 0x7f00_0000_0000;
/// The allocation the test hovers: 6 MiB at `BASE + 8 MiB` on stream 0x5, still live at the end.
const HOVERED: u64 = BASE + 8 * MIB;
/// A pixel differs when a channel moves by more than this (anti-aliasing stays under it).
const CHANNEL_TOLERANCE: u8 = 40;
/// The screenshot matches when at most this fraction of its pixels differ.
/// (Here text in another font moves under 0.4% of them, a page coloured otherwise or without
/// its script over 6%.)
const PIXEL_TOLERANCE: f64 = 0.015;

fn frames(stack: &[(&str, &str, u32)]) -> Value {
    stack.iter().map(|&(name, file, line)| json!({"filename": file, "line": line, "name": name})).collect()
}

/// A snapshot in PyTorch's dict: one 32 MiB segment on stream 0x5, six allocations (two freed),
/// each entry and active block with its stack.
fn snapshot() -> Value {
    let kv = frames(&[("make_kv_cache", "model/attention.rs", 88), ("Decoder::new", "model/decoder.rs", 41)]);
    let act = frames(&[("mlp_forward", "model/mlp.rs", 17), ("train_step", "train.rs", 203)]);
    let tmp = frames(&[("softmax_scratch", "kernels/softmax.rs", 9)]);
    let free = frames(&[("drop_tensor", "tensor.rs", 311)]);
    let mut t = 1_700_000_000_000_000u64;
    let mut entry = |action: &str, addr: u64, size: u64, stack: &Value| {
        t += 250;
        json!({"action": action, "addr": addr, "size": size, "stream": 5, "time_us": t, "frames": stack})
    };
    let trace = vec![
        entry("segment_alloc", BASE, 32 * MIB, &Value::Array(vec![])),
        entry("alloc", BASE, 4 * MIB, &act),
        entry("alloc", BASE + 4 * MIB, 3 * MIB, &tmp),
        entry("alloc", HOVERED, 6 * MIB, &kv),
        entry("alloc", BASE + 14 * MIB, 5 * MIB, &act),
        entry("free_requested", BASE + 4 * MIB, 3 * MIB, &free),
        entry("free_completed", BASE + 4 * MIB, 3 * MIB, &free),
        entry("alloc", BASE + 19 * MIB, 2 * MIB, &tmp),
        entry("free_requested", BASE, 4 * MIB, &free),
        entry("free_completed", BASE, 4 * MIB, &free),
        entry("alloc", BASE + 21 * MIB, 7 * MIB, &act),
    ];
    let block = |addr: u64, size: u64, state: &str, stack: &Value| {
        let requested = if state == "inactive" { 0 } else { size };
        json!({"address": addr, "size": size, "requested_size": requested, "state": state, "frames": stack})
    };
    let none = Value::Array(vec![]);
    let blocks = vec![
        block(BASE, 8 * MIB, "inactive", &none),
        block(HOVERED, 6 * MIB, "active_allocated", &kv),
        block(BASE + 14 * MIB, 5 * MIB, "active_allocated", &act),
        block(BASE + 19 * MIB, 2 * MIB, "active_allocated", &tmp),
        block(BASE + 21 * MIB, 7 * MIB, "active_allocated", &act),
        block(BASE + 28 * MIB, 4 * MIB, "inactive", &none),
    ];
    json!({
        "segments": [{"device": 0, "address": BASE, "total_size": 32 * MIB, "stream": 5, "segment_type": "large",
                      "is_expandable": false, "blocks": blocks, "frames": []}],
        "device_traces": [trace],
    })
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cudasem-memviz-browser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The page `cudasem memviz` writes for the snapshot, with `extra` options.
fn write_page(dir: &Path, name: &str, extra: &[&str]) -> String {
    let json = dir.join("snapshot.json");
    std::fs::write(&json, snapshot().to_string()).unwrap();
    let html = dir.join(name);
    let o = Command::new(common::cudasem_binary())
        .args(["memviz", json.to_str().unwrap(), "-o", html.to_str().unwrap()])
        .args(extra)
        .output()
        .expect("the cudasem binary starts");
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(html).unwrap()
}

/// The page's data blob.
fn data(page: &str) -> Value {
    let at = page.find("id=\"memviz-data\">").expect("the data blob") + "id=\"memviz-data\">".len();
    let end = at + page[at..].find("</script>").unwrap();
    serde_json::from_str(&page[at..end]).expect("the blob is JSON")
}

/// Catches every exception and `console.error` from the start of the page (before its script).
const CATCHER: &str = "<script>window.__errors=[];window.addEventListener('error',function(e){__errors.push('error: '+e.message)});\
var __ce=console.error;console.error=function(){__errors.push('console.error: '+[].join.call(arguments,' '));__ce.apply(console,arguments)};</script>";

/// After the page's script: zooms with the buttons, drags, resets, then moves the mouse onto the
/// middle of the band `band` (found by hit-testing its box) and block `block`, writing what it
/// saw into `<pre id="probe">` (hidden) as JSON; the page is left hovering the band.
fn probe(band: usize, block: usize) -> String {
    format!(
        "<script>(function(){{var out={{errors:window.__errors,ready:document.body.getAttribute('data-memviz')}};\
function at(el){{var r=el.getBoundingClientRect();for(var fy=0.5;fy<1;fy+=0.05)for(var fx=0.5;fx<1;fx+=0.05){{\
var x=r.left+r.width*fx,y=r.top+r.height*fy;if(document.elementFromPoint(x,y)===el)return[x,y];}}return null;}}\
function move(el){{el.scrollIntoView({{block:'center'}});var p=at(el);if(!p)return 'no point of the element is on top';\
el.dispatchEvent(new MouseEvent('mousemove',{{clientX:p[0],clientY:p[1],bubbles:true}}));\
return document.getElementById('memviz-tip').textContent;}}\
var bar=document.getElementById('memviz-zoom'),label=function(){{return bar.querySelector('span').textContent}};\
out.whole=label();bar.children[1].click();bar.children[1].click();out.zoomed=label();\
var svg=document.querySelector('#timeline svg'),r=svg.getBoundingClientRect();\
svg.dispatchEvent(new MouseEvent('mousedown',{{clientX:r.left+600,clientY:r.top+200,bubbles:true}}));\
window.dispatchEvent(new MouseEvent('mousemove',{{clientX:r.left+300,clientY:r.top+200}}));\
window.dispatchEvent(new MouseEvent('mouseup',{{}}));out.dragged=label();bar.children[2].click();out.reset=label();\
out.block=move(document.querySelector('[data-k=\"{block}\"]'));window.scrollTo(0,0);out.band=move(document.querySelector('[data-b=\"{band}\"]'));\
var pre=document.createElement('pre');pre.id='probe';pre.style.display='none';pre.textContent=JSON.stringify(out);\
document.body.appendChild(pre);}})();</script>"
    )
}

/// Hides the text of the page (drawn in whatever fonts the machine has): the screenshot compares
/// shapes, colours and places, the text is checked through the DOM.
/// Lines have one height whatever the font, so the layout does not move with the font either.
const NO_TEXT: &str =
    "<style>*{color:transparent !important;line-height:16px !important}svg text{fill:transparent !important}</style>";

/// The page with the catcher first in its head and the probe last in its body.
fn instrumented(page: &str, band: usize, block: usize) -> String {
    let page = page.replacen("<head>", &format!("<head>{CATCHER}{NO_TEXT}"), 1);
    let at = page.rfind("</body>").expect("a body");
    format!("{}{}{}", &page[..at], probe(band, block), &page[at..])
}

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CUDASEM_CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
        let found = std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()))
            .unwrap_or_default();
        if let Some(p) = found {
            return p;
        }
    }
    panic!(
        "no Chromium: this test drives a real headless browser. Install Debian's package \
         (`apt-get install chromium fonts-dejavu-core`, as .ci/run does) or set CUDASEM_CHROMIUM to a Chromium binary"
    );
}

/// Runs headless Chromium on `file` with `args`, killed after a minute; returns its stdout.
fn run_chromium(dir: &Path, file: &Path, args: &[String]) -> String {
    let profile = dir.join(format!("profile-{}", file.file_name().unwrap().to_string_lossy()));
    let mut child = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"])
        .args(["--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1280,900"])
        .args(["--font-render-hinting=none", "--virtual-time-budget=5000", "--allow-file-access-from-files"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", file.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("Chromium starts");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("Chromium ran past a minute on {}", file.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "Chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the probe saw, read from the DOM Chromium dumps.
fn probed(dom: &str) -> Value {
    let at = dom.find("<pre id=\"probe\"").expect("the probe ran (no <pre id=probe> in the DOM)");
    let at = at + dom[at..].find('>').unwrap() + 1;
    let end = at + dom[at..].find("</pre>").unwrap();
    let text = dom[at..end].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The fraction of pixels of `a` and `b` (same size) that differ beyond the channel tolerance.
fn differing(a: &Pixmap, b: &Pixmap) -> f64 {
    assert_eq!((a.width(), a.height()), (b.width(), b.height()), "screenshots of one size");
    let far = a.pixels().iter().zip(b.pixels()).filter(|(p, q)| {
        let (p, q) = (p.demultiply(), q.demultiply());
        [p.red().abs_diff(q.red()), p.green().abs_diff(q.green()), p.blue().abs_diff(q.blue())]
            .into_iter()
            .any(|d| d > CHANNEL_TOLERANCE)
    });
    far.count() as f64 / a.pixels().len() as f64
}

/// A screenshot of `file`, with further Chromium switches `extra` (later switches win).
fn screenshot(dir: &Path, file: &Path, extra: &[&str]) -> Pixmap {
    let png = dir.join(format!("{}{}.png", file.file_name().unwrap().to_string_lossy(), extra.join("")));
    let mut args = vec![format!("--screenshot={}", png.display())];
    args.extend(extra.iter().map(|s| s.to_string()));
    run_chromium(dir, file, &args);
    Pixmap::load_png(&png).expect("Chromium wrote a PNG")
}

/// The indices of the band and the segment block of the hovered allocation.
fn hovered(data: &Value) -> (usize, usize) {
    let addr = format!("{HOVERED:#x}");
    let find = |table: &str, column: usize| {
        data[table].as_array().unwrap().iter().position(|row| row[column] == addr.as_str()).unwrap_or_else(|| {
            panic!("no row of {table} for {addr}: {data}");
        })
    };
    (find("bands", 2), find("blocks", 0))
}

#[test]
fn the_interactive_page_answers_who_allocated_this_in_a_browser() {
    let dir = temp_dir();
    let page = write_page(&dir, "page.html", &[]);
    for fetching in ["src=", "href=", "fetch(", "XMLHttpRequest", "import(", "url(http"] {
        assert!(!page.contains(fetching), "nothing fetched, but the page has {fetching}");
    }
    let data = data(&page);
    let (band, block) = hovered(&data);
    let file = dir.join("instrumented.html");
    std::fs::write(&file, instrumented(&page, band, block)).unwrap();
    let seen = probed(&run_chromium(&dir, &file, &["--dump-dom".to_string()]));

    assert_eq!(seen["errors"], json!([]), "no exception, no console.error: {seen}");
    assert_eq!(seen["ready"], "ready", "the page's script ran to its end: {seen}");
    let tip = seen["band"].as_str().unwrap();
    let want = "make_kv_cache  model/attention.rs:88";
    assert!(tip.contains(&format!("6.00 MiB ({} bytes) at {HOVERED:#x}", 6 * MIB)), "{tip}");
    assert!(tip.contains("stream 0x5, large pool") && tip.contains("allocated at event 3"), "{tip}");
    assert!(tip.contains("still live at the end"), "{tip}");
    let first = tip.find(want).unwrap_or_else(|| panic!("the frames of the allocation: {tip}"));
    assert!(first < tip.find("Decoder::new  model/decoder.rs:41").unwrap(), "first frames first: {tip}");
    assert!(!tip.contains("mlp_forward"), "only its own stack: {tip}");
    let tip = seen["block"].as_str().unwrap();
    assert!(tip.contains(want) && tip.contains("active_allocated"), "the segment's block: {tip}");
    assert!(seen["whole"].as_str().unwrap().starts_with("all 11 events"), "{seen}");
    assert_eq!(seen["zoomed"], "events 4 to 7 of 11", "two zooms in around the middle: {seen}");
    assert_ne!(seen["dragged"], seen["zoomed"], "a drag pans: {seen}");
    assert_eq!(seen["reset"], seen["whole"], "{seen}");

    // The hovered page, as pixels.
    let shot = screenshot(&dir, &file, &[]);
    let reference = common::repo_root().join("tests/data/memviz_browser.png");
    if std::env::var_os("CUDASEM_UPDATE_REFERENCE").is_some() {
        shot.save_png(&reference).unwrap();
    }
    let expected = Pixmap::load_png(&reference).expect("tests/data/memviz_browser.png");
    let off = differing(&shot, &expected);
    eprintln!("the screenshot: {off:.4} of its pixels differ from the reference");
    assert!(off <= PIXEL_TOLERANCE, "{:.4} of the pixels differ from the reference (at most {PIXEL_TOLERANCE})", off);
    // Text in another font (what a machine without DejaVu would draw): within the tolerance.
    for font in ["Liberation Sans", "Liberation Serif"] {
        let css = format!("<style>*,svg text{{font-family:'{font}' !important}}</style></head>");
        let swapped = dir.join(format!("{}.html", font.replace(' ', "_")));
        std::fs::write(&swapped, instrumented(&page, band, block).replacen("</head>", &css, 1)).unwrap();
        let off = differing(&screenshot(&dir, &swapped, &[]), &expected);
        assert!(off <= PIXEL_TOLERANCE, "in {font}, {off:.4} of the pixels differ: the tolerance must absorb fonts");
    }

    // The page without its script (what a broken script leaves: no zoom bar, no tooltip): far
    // from the reference.
    let broken = write_page(&dir, "static.html", &["--static"]);
    let broken_file = dir.join("static_instrumented.html");
    std::fs::write(&broken_file, broken.replacen("<head>", &format!("<head>{NO_TEXT}"), 1)).unwrap();
    let off = differing(&screenshot(&dir, &broken_file, &[]), &expected);
    eprintln!("without the script: {off:.4} of the pixels differ");
    assert!(off > 3.0 * PIXEL_TOLERANCE, "a page without its script differs: only {off:.4} of the pixels");

    // The same snapshot coloured by stream, hovered alike: far from the reference.
    let other = write_page(&dir, "by_stream.html", &["--by-stream"]);
    let other_file = dir.join("by_stream_instrumented.html");
    std::fs::write(&other_file, instrumented(&other, band, block)).unwrap();
    let off = differing(&screenshot(&dir, &other_file, &[]), &expected);
    eprintln!("coloured by stream: {off:.4} of the pixels differ");
    assert!(off > 3.0 * PIXEL_TOLERANCE, "a different page differs: only {off:.4} of the pixels");
    let _ = std::fs::remove_dir_all(&dir);
}
