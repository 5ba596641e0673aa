package broker

import "context"

// Broadcaster is a Backend that can hand one message to every listener of
// a topic at once (a fanout), for the fleet's heartbeats and commands
// (package fleet). What is broadcast is not kept: a listener hears what
// is sent while it listens, and a slow one may miss some. A listener does
// not outlive its connection: on a backend that loses one (RabbitMQ) it
// ends with an error rather than resubscribe, and its owner listens again
// (package console's and package fleet's do, after a backoff). A wrapper
// that embeds a Backend interface hides it.
type Broadcaster interface {
	// Broadcast sends body to every listener of topic.
	Broadcast(ctx context.Context, topic string, body []byte) error
	// Listen starts listening to topic, until Close, the backend's Close
	// (Err: ErrClosed) or a lost connection (Err says so). ctx bounds
	// the start only.
	Listen(ctx context.Context, topic string) (Listener, error)
}

// Listener receives what is broadcast on one topic.
type Listener interface {
	// Messages yields each message heard, until the listener ends; then
	// it is closed.
	Messages() <-chan []byte
	// Err says why the listener ended: nil after Close, else the cause.
	// Valid once Messages is closed.
	Err() error
	// Close ends the listener.
	Close()
}
