go
go
