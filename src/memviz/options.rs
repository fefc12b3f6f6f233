//! What a picture draws: the device, the moment of the segment view, the timeline's colours, the
//! stacks the interactive page shows.

use super::stacks::Stacks;

/// How allocations are coloured on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorBy {
    /// By size, small (dark) to large (bright), as a heat scale.
    #[default]
    Size,
    /// By stream, one colour each.
    Stream,
}

/// What to draw.
///
/// Build it with `..Default::default()`: fields may be added.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The device (`None`: the first one with a trace or segments).
    pub device: Option<usize>,
    /// The segment view's moment: just after this trace entry (0-based) of the device's history
    /// (`None`: the peak of live bytes).
    pub at: Option<usize>,
    /// The timeline's colours.
    pub color_by: ColorBy,
    /// The stack traces the interactive page shows on hover
    /// ([`Picture::to_interactive_html`](super::Picture::to_interactive_html)): those of the
    /// snapshot's file ([`Stacks::read`]); `None` shows none.
    pub stacks: Option<std::sync::Arc<Stacks>>,
}
