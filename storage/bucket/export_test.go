package bucket

// OutstandingBuffers is how many pool buffers are handed out and not returned.
func OutstandingBuffers() int64 { return outstanding.Load() }
