//! `torch.cuda` for Rust: devices, guards, streams, events and peer access.
//!
//! Every name here is PyTorch's (see the crate documentation for the full map).

pub use crate::driver::DeviceProperties;
pub use crate::runtime::{
    can_device_access_peer, current_device, current_stream, default_stream, device_count, driver_name,
    enable_peer_access, get_device_name, get_device_properties, is_available, is_peer_access_enabled, mem_get_info,
    set_device, set_stream, synchronize, with_device, with_stream, DeviceGuard, Event, EventFlags, Stream, StreamGuard,
};
