# The local test stack (PostgreSQL 15, MariaDB 10.11, Kafka 4.4.0 KRaft, Kafka Connect with Debezium
# and the Prometheus JMX exporter agent, Prometheus tools, kcat).
# Included by the top-level Makefile; everything is done by deploy/local/stack.sh.

# The path of stack.sh, taken while this file is being read so that it stays
# right wherever the including Makefile lives.
STACK_SH := $(dir $(lastword $(MAKEFILE_LIST)))stack.sh

.PHONY: stack-up stack-down stack-status
stack-up: ## start PostgreSQL, MariaDB, Kafka and Kafka Connect (with the JMX exporter for Debezium's metrics) under .stack (installs what is missing); prints the DSN, brokers and URLs
	@bash $(STACK_SH) up

stack-down: ## stop the local stack and delete its data (keeps the downloaded Kafka jars)
	@bash $(STACK_SH) down

stack-status: ## print whether each server of the local stack is up
	@bash $(STACK_SH) status || true
