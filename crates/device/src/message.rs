//! Vendor-defined messages (PCIe Base Spec 2.2.8.6) a device sends and receives.

use pcielab_wire::Bdf;

/// Where a vendor-defined message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VdmRoute {
    /// Routed to the root complex (routing 000b).
    RootComplex,
    /// Routed by ID to the function with this ID (routing 010b): an endpoint, a port,
    /// or the host bridge (the root complex).
    Id(Bdf),
    /// Broadcast from the root complex (routing 011b): down every root port, and
    /// copied by each switch down every downstream port, to every device. Only the
    /// root complex sends it.
    Broadcast,
    /// Local, terminating at the receiver (routing 100b): from a device to the port
    /// above it (a root port: the root complex takes it; a switch's downstream port
    /// supports none). Only devices send it.
    Local,
}

/// A Vendor_Defined message (PCIe Base Spec 2.2.8.6): posted, 4 DW header with the
/// Vendor ID and four bytes of vendor data, and optionally whole DWs of payload (then
/// a MsgD, at most MPS bytes).
///
/// ```
/// use pcielab_device::{VdmRoute, VendorMessage};
/// // An MCTP-style message to the root complex (Vendor ID 0x1ab4, Type 1).
/// let m = VendorMessage::new(VdmRoute::RootComplex, 0x1ab4, 0, vec![1, 0, 0, 0]);
/// assert!(m.type1);
/// assert!(m.check(256).is_ok());
/// assert!(VendorMessage { payload: vec![1, 2, 3], ..m }.check(256).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VendorMessage {
    /// Type 1 (message code 7Fh): a receiver that does not support it drops it
    /// silently. Type 0 (7Eh): it reports Unsupported Request.
    pub type1: bool,
    /// The routing.
    pub route: VdmRoute,
    /// Vendor ID (header bytes 10–11).
    pub vendor_id: u16,
    /// Vendor-defined header bytes 12–15 (big-endian on the wire).
    pub vendor_data: u32,
    /// Payload: whole DWs, at most MPS bytes (empty: a Msg without data).
    pub payload: Vec<u8>,
}

impl VendorMessage {
    /// A Type 1 message.
    pub fn new(route: VdmRoute, vendor_id: u16, vendor_data: u32, payload: Vec<u8>) -> Self {
        VendorMessage {
            type1: true,
            route,
            vendor_id,
            vendor_data,
            payload,
        }
    }

    /// Checks the payload: whole DWs, at most `mps` bytes.
    pub fn check(&self, mps: u32) -> Result<(), String> {
        let n = self.payload.len();
        if n % 4 != 0 {
            return Err(format!(
                "vendor-defined message payload of {n} bytes: must be whole DWs (a multiple of 4)"
            ));
        }
        if n > mps as usize {
            return Err(format!(
                "vendor-defined message payload of {n} bytes exceeds MPS ({mps} bytes)"
            ));
        }
        Ok(())
    }
}
