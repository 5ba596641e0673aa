//go:build goexperiment.jsonv2

package queuey

import "encoding/json"

// unmarshalPayload is json.Unmarshal(data, v). (Under the jsonv2
// experiment, Decoder and Unmarshal are implemented apart; the pooled
// decoder is used only with the classic implementation.)
func unmarshalPayload[T any](data []byte, v *T) (*T, error) {
	return v, json.Unmarshal(data, v)
}

// payloadPoolable is false: there is no pool under the experiment.
func payloadPoolable[T any]() bool { return false }
