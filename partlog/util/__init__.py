"""Ground-floor utilities shared by the command lines and benchmarks of
partlog and walmgr: one-line CLI errors, /proc counters, the malloc arena
cap and the SeaweedFS launcher.  Imports nothing else from partlog, so any
package may use it."""
