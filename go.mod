module github.com/queuey-go/queuey

go 1.26.0

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/google/go-cmp v0.7.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.25.0
)

require github.com/rabbitmq/amqp091-go v1.16.0
