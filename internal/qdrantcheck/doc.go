// Package qdrantcheck holds the differential check of a Qdrant API against
// the Qdrant server: its tests send a server the requests the server 1.17.1
// was recorded answering (testdata/answers.jsonl) and require the same
// answers, code, message and response, and add cases of their own where
// the projector makes calls the recording lacks, each saying what its
// expected answer rests on until a real server checks it.
//
// They run against a private server of PROJECTOR_TEST_QDRANT_BIN
// (qdrant-engine, or a real Qdrant server when scripts/services.sh was given
// QDRANT_BIN), or else against the shared one of PROJECTOR_QDRANT_ADDR.
package qdrantcheck
