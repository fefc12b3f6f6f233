//! What a picture draws: the device, the moment of the segment view, the timeline's colours.

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
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The device (`None`: the first one with a trace or segments).
    pub device: Option<usize>,
    /// The segment view's moment: just after this trace entry (0-based) of the device's history
    /// (`None`: the peak of live bytes).
    pub at: Option<usize>,
    /// The timeline's colours.
    pub color_by: ColorBy,
}
