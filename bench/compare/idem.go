package main

import (
	"context"
	"fmt"
	"net/http"
)

// pingIdem waits for every node's /readyz.
func pingIdem(ctx context.Context, target string) error {
	for _, a := range splitList(target) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s/readyz: %s", a, resp.Status)
		}
	}
	return nil
}
