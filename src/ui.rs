//! The monitor UI. The UI task owns [`state::State`] and only draws; collectors publish owned
//! snapshots over a watch channel; keys become [`command::Command`]s through the keymap; one pure
//! reducer (`update::update`, re-exported as `state::update`) turns messages into state changes and effects; views render
//! `&State` and never do I/O.

pub mod app;
pub mod cluster;
pub mod command;
pub mod config;
pub mod confirm;
pub mod derive;
pub mod dialog;
pub mod effect;
pub mod evict_ask;
pub mod filter;
pub mod fleet;
pub mod hit;
pub mod keymap;
pub mod logbuf;
pub mod mig_stage;
pub mod modal;
pub mod model_ask;
pub mod msg;
pub mod rows;
pub mod scroll;
pub mod stage;
pub mod state;
pub mod terminal;
pub mod theme;
pub mod update;
pub mod view;
pub mod views;
