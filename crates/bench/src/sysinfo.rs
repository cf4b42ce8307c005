//! Process and system sampling from /proc (being written).
