package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Broker loggers: Kafka's BROKER_LOGGER config resources (KIP-412,
// `kafka-configs.sh --entity-type broker-loggers --entity-name <id>`), the
// log levels of one broker, read with DescribeConfigs and changed with
// IncrementalAlterConfigs on that broker alone, at once and until it
// restarts (nothing goes through the metadata log, as in Kafka). Sediment
// has one logger, "root" (Kafka's name for the top of its tree): every line
// the broker writes, raft's included, goes through Config.Logger, whose
// handler's level is Config.LogLevel. Its value is one of Kafka's level
// names (LogLevelConfig.VALID_LOG_LEVELS): TRACE and DEBUG (Sediment writes
// nothing finer than debug), INFO, WARN, ERROR, FATAL (nothing below it:
// Sediment writes no fatal lines).

// rootLogger is the one logger a broker has.
const rootLogger = "root"

// logLevels are Kafka's log level names, finest first, with the slog level
// each stands for.
var logLevels = []struct {
	name  string
	level slog.Level
}{
	{"TRACE", slog.LevelDebug - 4},
	{"DEBUG", slog.LevelDebug},
	{"INFO", slog.LevelInfo},
	{"WARN", slog.LevelWarn},
	{"ERROR", slog.LevelError},
	{"FATAL", slog.LevelError + 4},
}

// logLevelName is the name of the finest Kafka level that l lets through
// whole (a level between two names is named by the coarser).
func logLevelName(l slog.Level) string {
	for _, n := range logLevels {
		if n.level >= l {
			return n.name
		}
	}
	return logLevels[len(logLevels)-1].name
}

// rootLogLevel is the current level of the broker's logger: Config.LogLevel,
// or, when the level is fixed, the finest one its handler takes.
func (b *Broker) rootLogLevel() slog.Level {
	if b.cfg.LogLevel != nil {
		return b.cfg.LogLevel.Level()
	}
	for _, n := range logLevels {
		if b.cfg.Logger.Enabled(context.Background(), n.level) {
			return n.level
		}
	}
	return logLevels[len(logLevels)-1].level + 4
}

// checkLoggerResource checks a BROKER_LOGGER resource's name: this
// broker's id (Kafka: INVALID_REQUEST otherwise, the admin client sends each
// broker's own).
func (b *Broker) checkLoggerResource(name string) error {
	if name == "" {
		return fmt.Errorf("%w: broker id must not be empty", kerr.InvalidRequest)
	}
	if id, err := strconv.ParseInt(name, 10, 32); err != nil || int32(id) != b.cfg.NodeID {
		return fmt.Errorf("%w: unexpected broker id, expected %d but received %s", kerr.InvalidRequest, b.cfg.NodeID, name)
	}
	return nil
}

// describeBrokerLoggers fills rr (DescribeConfigs of a BROKER_LOGGER
// resource): each logger (of those named, when names are given) with its
// level, source DYNAMIC_BROKER_LOGGER_CONFIG, as Kafka's ConfigHelper.
func (b *Broker) describeBrokerLoggers(res kmsg.DescribeConfigsRequestResource, rr *kmsg.DescribeConfigsResponseResource) {
	if err := b.checkLoggerResource(res.ResourceName); err != nil {
		rr.ErrorCode, rr.ErrorMessage = errCode(err), errMessage(err)
		return
	}
	if len(res.ConfigNames) > 0 && !containsStr(res.ConfigNames, rootLogger) {
		return
	}
	c := kmsg.NewDescribeConfigsResponseResourceConfig()
	c.Name, c.Value = rootLogger, kmsg.StringPtr(logLevelName(b.rootLogLevel()))
	c.Source = kmsg.ConfigSourceDynamicBrokerLoggerConfig
	c.ConfigType = kmsg.ConfigTypeString
	rr.Configs = append(rr.Configs, c)
}

// alterBrokerLoggers applies IncrementalAlterConfigs to a BROKER_LOGGER
// resource, all its operations or none (Kafka's RuntimeLoggerManager):
// SET of a logger to one of Kafka's level names (case as Kafka spells
// them; another: INVALID_CONFIG); a logger that does not exist:
// INVALID_CONFIG; DELETE of the root logger (the only one), APPEND and
// SUBTRACT: INVALID_REQUEST. The change is logged at WARN, as Kafka does.
func (b *Broker) alterBrokerLoggers(res kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	if err := b.checkLoggerResource(res.ResourceName); err != nil {
		return err
	}
	set, level := false, slog.Level(0)
	for _, c := range res.Configs {
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if c.Name != rootLogger {
				return fmt.Errorf("%w: logger %s does not exist", errInvalidConfig, c.Name)
			}
			found := false
			for _, n := range logLevels {
				if c.Value != nil && *c.Value == n.name {
					level, found = n.level, true
				}
			}
			if !found {
				return fmt.Errorf("%w: cannot set the log level of %s to %s as it is not a supported log level; valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN",
					errInvalidConfig, c.Name, derefOr(c.Value, "null"))
			}
			set = true
		case kmsg.IncrementalAlterConfigOpDelete:
			if c.Name != rootLogger {
				return fmt.Errorf("%w: logger %s does not exist", errInvalidConfig, c.Name)
			}
			return fmt.Errorf("%w: removing the log level of the %s logger is not allowed", kerr.InvalidRequest, rootLogger)
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			return fmt.Errorf("%w: %s is not allowed for the BROKER_LOGGER resource", kerr.InvalidRequest, c.Op)
		default:
			return fmt.Errorf("%w: unknown operation %d for the BROKER_LOGGER resource", kerr.InvalidRequest, c.Op)
		}
	}
	if !set || validateOnly {
		return nil
	}
	if b.cfg.LogLevel == nil {
		return fmt.Errorf("%w: this broker's log level is fixed (it was started without a settable level)", errInvalidConfig)
	}
	b.cfg.LogLevel.Set(level)
	b.log.Warn("updated the log level of root", "to", logLevelName(level))
	return nil
}

func derefOr(s *string, or string) string {
	if s == nil {
		return or
	}
	return *s
}
