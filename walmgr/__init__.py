"""walmgr: the WAL File Manager that deletes orphaned WAL objects."""
