package tiering

// TestBatch builds a valid batch for the external tests.
var TestBatch = makeBatch
