package node

import (
	"log/slog"

	"github.com/batonlock/baton/acl"
	"github.com/batonlock/baton/internal/tlsfiles"
)

// security is the server's reloadable TLS configuration and ACL; either
// may be nil when off.
type security struct {
	tls *tlsfiles.Server
	acl *acl.Reloadable
}

func loadSecurity(cfg *Config) (*security, error) {
	sec := &security{}
	var err error
	if cfg.TLS.Cert != "" {
		if sec.tls, err = tlsfiles.NewServer(cfg.TLS); err != nil {
			return nil, err
		}
	}
	if cfg.ACLFile != "" {
		if sec.acl, err = acl.LoadReloadable(cfg.ACLFile); err != nil {
			return nil, err
		}
	}
	return sec, nil
}

// reload re-reads every file on SIGHUP. A file that fails to load keeps
// the previous state in force; established sessions are never touched.
func (sec *security) reload(logger *slog.Logger) {
	if sec.tls != nil {
		if err := sec.tls.Reload(); err != nil {
			logger.Error("SIGHUP: cannot reload TLS files; keeping the previous certificate", "err", err)
		} else {
			logger.Info("SIGHUP: TLS certificate, key and client CA reloaded")
		}
	}
	if sec.acl != nil {
		if err := sec.acl.Reload(); err != nil {
			logger.Error("SIGHUP: cannot reload the ACL; keeping the previous rules", "err", err)
		} else {
			logger.Info("SIGHUP: ACL reloaded", "rules", sec.acl.Len(), "admin_rules", sec.acl.AdminLen())
		}
	}
}

func (sec *security) mode() string {
	switch {
	case sec.tls == nil:
		return "off"
	case sec.tls.MutualTLS():
		return "mutual"
	}
	return "server"
}
