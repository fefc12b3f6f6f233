//! [`Driver::launch`](crate::driver::Driver::launch) on the simulated machine: the op is checked
//! now (well formed, every span live, peer access enabled for memory of other devices, a
//! matrix product's workspace live memory of the stream's device) and
//! queued on the stream's worker, which runs the CPU kernels over the devices' memory by address
//! and advances the stream's simulated time by the kernel's modelled cost.

use super::memory::lock;
use super::memory::{device_of, DeviceMemory};
use super::sim_driver::SimDriver;
use super::stream::Job;
use super::time;
use crate::driver::{DevicePtr, StreamId};
use crate::error::{Error, Result};
use crate::kernel::KernelOp;
use crate::kernels::cpu::{self, Memory};
use std::sync::Arc;

/// Every device's memory, addressed as one space (a pointer tells its device).
struct SimMemory {
    devices: Vec<Arc<DeviceMemory>>,
}

impl SimMemory {
    fn of(&self, at: DevicePtr) -> Result<&DeviceMemory> {
        device_of(at).and_then(|d| self.devices.get(d)).map(|m| &**m).ok_or(Error::InvalidPointer {
            device: usize::MAX,
            ptr: at.0,
            reason: "not an address of any simulated device".into(),
        })
    }
}

impl Memory for SimMemory {
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()> {
        self.of(at)?.read(at, out);
        Ok(())
    }

    fn write_runs(&self, at: DevicePtr, span: &[u8], runs: &[(usize, usize)]) -> Result<()> {
        let mem = self.of(at)?;
        for &(start, len) in runs {
            mem.write(at.offset(start), &span[start..start + len]);
        }
        Ok(())
    }
}

impl crate::driver::comm::DeviceBytes for SimMemory {
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()> {
        let mem = self.of(at)?;
        mem.check_span(at, out.len())?;
        mem.read(at, out);
        Ok(())
    }

    fn write(&self, at: DevicePtr, data: &[u8]) -> Result<()> {
        let mem = self.of(at)?;
        mem.check_span(at, data.len())?;
        mem.write(at, data);
        Ok(())
    }
}

/// What a kernel's host twin reaches: every device's memory and the pinned host memory (its
/// pinned arguments, as a CUDA kernel reaches them through their mapped addresses).
struct TwinMemory {
    devices: SimMemory,
    pinned: super::host::SimPinnedTable,
}

impl crate::driver::comm::DeviceBytes for TwinMemory {
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()> {
        crate::driver::comm::DeviceBytes::read(&self.devices, at, out)
    }

    fn write(&self, at: DevicePtr, data: &[u8]) -> Result<()> {
        crate::driver::comm::DeviceBytes::write(&self.devices, at, data)
    }

    fn read_host(&self, at: crate::driver::HostPtr, out: &mut [u8]) -> Result<()> {
        self.pinned.read(at, out)
    }

    fn write_host(&self, at: crate::driver::HostPtr, data: &[u8]) -> Result<()> {
        self.pinned.write(at, data)
    }
}

impl SimDriver {
    pub(super) fn launch_op(&self, stream: StreamId, op: &KernelOp) -> Result<()> {
        op.validate()?;
        let s = self.stream(stream)?;
        let device = s.device;
        self.check_views(device, op.inputs().into_iter().chain(op.outputs()), || op.name())?;
        if let KernelOp::Gemm { workspace: Some(w), .. } = op {
            // The CPU kernels need no scratch; a workspace must still be live memory of the
            // stream's device, as cuBLASLt's is.
            self.span(w.ptr, w.bytes)?;
            let owner = device_of(w.ptr).unwrap_or(usize::MAX);
            if owner != device {
                return Err(Error::InvalidArgument {
                    op: "launch",
                    reason: format!("a gemm on cuda:{device} was given a workspace of cuda:{owner}"),
                });
            }
        }
        let mem = SimMemory { devices: self.devices.iter().map(|d| d.memory.clone()).collect() };
        let op = op.clone();
        s.submit(Job::run("kernel", time::kernel(&op), move || {
            // Checked above: the op is well formed and its spans are live, so the kernels should
            // not fail; one that does (memory freed meanwhile, the caller's bug as on a GPU) is
            // kept as the device's asynchronous error, as a CUDA kernel fault is: every later
            // synchronization point of the device reports it.
            if let Err(e) = cpu::execute(&op, &mem) {
                mem.devices[device].dropped.record(e);
            }
        }));
        Ok(())
    }

    /// Every view is live memory of `device` or of a peer it has access to (`name`: the kernel,
    /// for the error).
    pub(super) fn check_views<'a>(
        &self,
        device: usize,
        views: impl Iterator<Item = &'a crate::kernel::BufferView>,
        name: impl Fn() -> String,
    ) -> Result<()> {
        for v in views {
            let Some((at, len)) = v.byte_span() else { continue };
            self.span(at, len)?;
            let owner = device_of(at).unwrap_or(usize::MAX);
            let peer_ok = owner == device || lock(&self.dev(device)?.peers_enabled).get(owner).copied() == Some(true);
            if !peer_ok {
                return Err(Error::InvalidArgument {
                    op: "launch",
                    reason: format!(
                        "a {} kernel on cuda:{device} uses memory of cuda:{owner}, but peer access from cuda:{device} \
                         to cuda:{owner} is not enabled (cudasem::cuda::enable_peer_access)",
                        name()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Queues a host job with every device's memory (the simulated collectives); free in
    /// simulated time beyond the waits it makes.
    pub(super) fn queue_host_job(&self, stream: StreamId, job: crate::driver::comm::HostJob) -> Result<()> {
        let s = self.stream(stream)?;
        if s.capture().is_some() {
            return Err(Error::Unsupported {
                op: "a collective in a CUDA graph capture",
                driver: "sim",
                reason: "the simulated collectives run once and cannot be replayed; capture them with \
                         CUDASEM_DRIVER=cuda (NCCL), or run them outside the capture"
                    .into(),
            });
        }
        let mem = SimMemory { devices: self.devices.iter().map(|d| d.memory.clone()).collect() };
        // Run once: a job is `FnOnce`, and the stream is not capturing, so nothing replays it.
        let job = std::sync::Mutex::new(Some(job));
        s.submit(Job::run("collective", 0, move || {
            if let Some(job) = lock(&job).take() {
                job(&mem)
            }
        }));
        Ok(())
    }

    /// Queues a kernel's host twin with every device's memory, as a kernel (a capture keeps it,
    /// and each replay runs it again); an error it returns is kept as the device's asynchronous
    /// error, as a kernel fault is.
    pub(super) fn queue_host_kernel(&self, stream: StreamId, kernel: crate::driver::comm::HostKernel) -> Result<()> {
        self.queue_host_kernel_as(stream, kernel, "kernel (host twin)", 0)
    }

    /// [`SimDriver::queue_host_kernel`] named `name`, taking `cost` of simulated time.
    pub(super) fn queue_host_kernel_as(
        &self,
        stream: StreamId,
        kernel: crate::driver::comm::HostKernel,
        name: &'static str,
        cost: time::SimTime,
    ) -> Result<()> {
        let s = self.stream(stream)?;
        let device = s.device;
        let devices = SimMemory { devices: self.devices.iter().map(|d| d.memory.clone()).collect() };
        let mem = TwinMemory { devices, pinned: self.host.clone() };
        s.submit(Job::run(name, cost, move || {
            if let Err(e) = kernel(&mem) {
                mem.devices.devices[device].dropped.record(e);
            }
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Driver;
    use crate::kernel::{BufferView, Dims, Workspace, GEMM_WORKSPACE_BYTES};
    use crate::{DType, PeerSpec, SimConfig};

    #[test]
    fn a_gemm_workspace_is_accepted_only_as_live_memory_of_the_streams_device() -> Result<()> {
        let d = SimDriver::new(SimConfig { devices: 2, memory: 1 << 30, peer: PeerSpec::All, ..SimConfig::default() });
        let s = d.create_stream(0, 0)?;
        let view = |ptr, shape: [usize; 2]| BufferView {
            ptr,
            dtype: DType::F32,
            shape: Dims::from(&shape[..]),
            strides: Dims::from(&[shape[1], 1][..]),
            offset: 0,
        };
        let (a, c) = (d.malloc(0, 4 * 4)?, d.malloc(0, 4 * 4)?);
        d.memcpy_htod(a, &[1.0f32, 2.0, 3.0, 4.0].map(f32::to_ne_bytes).concat(), s)?;
        let (ws0, ws1) = (d.malloc(0, GEMM_WORKSPACE_BYTES)?, d.malloc(1, GEMM_WORKSPACE_BYTES)?);
        let gemm = |w: Option<Workspace>| KernelOp::Gemm {
            lhs: view(a, [2, 2]),
            rhs: view(a, [2, 2]),
            dst: view(c, [2, 2]),
            bias: None,
            workspace: w,
        };
        d.launch(s, &gemm(Some(Workspace { ptr: ws0, bytes: GEMM_WORKSPACE_BYTES })))?;
        let mut out = [0u8; 16];
        d.memcpy_dtoh(&mut out, c, s)?;
        let got: Vec<f32> = out.chunks(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect();
        assert_eq!(got, [7.0, 10.0, 15.0, 22.0], "the product is computed; the workspace is not touched");
        let past_end = Workspace { ptr: ws0, bytes: GEMM_WORKSPACE_BYTES + 512 };
        let other_device = Workspace { ptr: ws1, bytes: GEMM_WORKSPACE_BYTES };
        for w in [past_end, other_device] {
            assert!(d.launch(s, &gemm(Some(w))).is_err(), "{w:?} is refused");
        }
        // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
        unsafe { d.free(0, ws0) }?;
        let freed = Workspace { ptr: ws0, bytes: GEMM_WORKSPACE_BYTES };
        assert!(d.launch(s, &gemm(Some(freed))).is_err(), "a freed workspace is refused");
        for (dev, p) in [(0, a), (0, c), (1, ws1)] {
            // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
            unsafe { d.free(dev, p) }?;
        }
        Ok(())
    }
}
