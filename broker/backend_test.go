package broker_test

import (
	"strings"
	"testing"

	"github.com/queuey-go/queuey/broker"
)

// TestSentinelErrorsSpeakForTheLibrary: the root package hands these very
// values to its users (errors.Is works across the layers), so their texts
// name the library, queuey, not its internal package.
func TestSentinelErrorsSpeakForTheLibrary(t *testing.T) {
	for _, err := range []error{
		broker.ErrClosed, broker.ErrUnknownQueue, broker.ErrUnroutable, broker.ErrNoQueue,
		broker.ErrPreconditionFailed, broker.ErrStaleDelivery, broker.ErrAlreadySettled, broker.ErrInUse,
	} {
		if !strings.HasPrefix(err.Error(), "queuey: ") {
			t.Errorf("%q does not begin with \"queuey: \"", err)
		}
	}
}
