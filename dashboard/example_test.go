package dashboard_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/dashboard"
)

// Mount the dashboard under /durable/ in the application's own server,
// behind a token, reached through a proxy that terminates TLS for
// ops.example.com.
func ExampleNew() {
	var eng *durable.Engine // the application's launched engine
	h, err := dashboard.New(eng, &dashboard.Options{Token: os.Getenv("DURABLE_UI_TOKEN"), Prefix: "/durable",
		AllowedHosts: []string{"ops.example.com"}, SecureCookies: true})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/durable/", h)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// Serve the dashboard alone on loopback, as `durable ui` does.
func ExampleListenAndServe() {
	var eng *durable.Engine
	token := dashboard.NewToken()
	err := dashboard.ListenAndServe(context.Background(), eng, "", &dashboard.Options{Token: token}, func(a net.Addr) {
		fmt.Printf("dashboard on http://%s/ (token %s)\n", a, token)
	})
	if err != nil {
		log.Fatal(err)
	}
}
