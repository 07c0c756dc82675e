//! Integration tests of pcielab-fabric: enumeration of the example topologies, routing,
//! the real `lspci` reading our dumps, and random topologies.

mod acs;
mod aspm;
mod atomic;
mod ats;
mod burst;
mod bus_master;
mod chaos;
mod common;
mod config;
mod device_api;
mod docs;
mod dpc;
mod ecrc;
mod enumerate;
mod errors;
mod golden;
mod host_model;
mod host_script;
mod hotplug;
mod interrupt_remapping;
mod intx;
mod io;
mod ltr;
mod page_loan;
mod pasid;
mod pme;
mod poison;
mod pri;
mod props;
mod raw;
mod real_lspci;
mod reset;
mod sriov;
mod timed;
mod vdm;
