module github.com/queuey-go/queuey/console/browsertest

go 1.26.0

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/chromedp/chromedp v0.23.1
	github.com/queuey-go/queuey v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/rabbitmq/amqp091-go v1.16.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/sync v0.25.0 // indirect
)

replace github.com/queuey-go/queuey => ../..
